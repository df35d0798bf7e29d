"""syntaxnmt.cpu.machine: the machine record (the thread policy and the kernels' threads: test_threads.py)."""

import json
import os
import sys

import torch

from syntaxnmt.cpu import machine
from syntaxnmt.cpu.machine import ISA_FLAGS, machine_info, machine_summary, with_load_after


def test_machine_info_holds_the_cpu_the_libraries_the_threads_and_the_load():
    info = with_load_after(machine_info())
    assert isinstance(info["cpu"], str) and info["cpu"]
    assert isinstance(info["logical_cpus"], int) and 1 <= info["usable_cpus"] <= info["logical_cpus"]
    assert info["physical_cores"] is None or 1 <= info["physical_cores"] <= info["logical_cpus"]
    assert list(info["isa"])[: len(ISA_FLAGS)] == list(ISA_FLAGS) and all(isinstance(v, bool) for v in info["isa"].values())
    assert all(k in ISA_FLAGS or k.startswith("amx_") for k in info["isa"])
    if sys.platform.startswith("linux") and info["arch"] == "x86_64":  # flags read from /proc/cpuinfo
        assert info["isa"]["avx2"] or info["torch_cpu_capability"] in ("DEFAULT", "NO AVX")
        assert info["isa"]["avx512f"] or info["torch_cpu_capability"] != "AVX512"
    assert info["torch"] == torch.__version__ and info["torch_threads"] == torch.get_num_threads()
    assert info["onednn"] is None or info["onednn"][0].isdigit()
    assert (info["onednn"] is not None) == torch.backends.mkldnn.is_available()
    assert info["mkl"] is None or info["mkl"][0].isdigit()
    assert isinstance(info["openmp_runtimes"], list) and all(isinstance(lib, str) and "omp" in lib for lib in info["openmp_runtimes"])
    assert set(info["env"]) == set(machine.THREAD_VARIABLES)
    assert info["env"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS")
    for key in ("load_average_before", "load_average_after"):
        assert info[key] is None or (len(info[key]) == 3 and all(isinstance(x, float) and x >= 0 for x in info[key]))
    assert json.loads(json.dumps(info)) == info  # goes into a benchmark's JSON as it is
    text = machine_summary(info)
    assert info["cpu"] in text and f"torch {torch.__version__}" in text and "before" in text and "after" in text
