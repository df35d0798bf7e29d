"""The process around a command: glibc memory settings, the device and the usable cores (the CPU threads: tests/cpu/test_threads.py; the machine record: tests/cpu/test_machine.py)."""

import os
import subprocess
import sys

import pytest
import torch

from syntaxnmt.errors import UserError
from syntaxnmt.runtime import keep_freed_memory, resolve_device

# Allocate and free a 32 MB block 10 times, then print the minor page faults it caused. With glibc's
# defaults the block is mmap-ed and unmapped every time (every page faults anew); with
# keep_freed_memory the freed block stays in the heap and is reused.
_PROBE = """
import ctypes, resource, sys
from syntaxnmt.runtime import keep_freed_memory
if sys.argv[1] == "on":
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 32 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_keep_freed_memory_makes_freed_blocks_reused_instead_of_unmapped():
    pages = 10 * (32 << 20) // 4096
    default, kept = _faults("off"), _faults("on")
    assert default > pages // 2  # every allocation touched fresh pages
    assert kept < pages // 4  # the first allocation faults, the next 9 reuse it
    assert keep_freed_memory() is True


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match="expected auto, cpu, cuda or cuda:N"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA GPU"):
            resolve_device("cuda")


# ---------------------------------------------------------------- the machine record


def test_the_cores_a_process_may_use_are_read_in_one_place(monkeypatch):
    """The decode workers' cap (config), the thread policy and the machine record (cpu.machine)
    all read :func:`syntaxnmt.runtime.usable_cpus`; before, config and cpu.machine each asked
    the system themselves."""
    from syntaxnmt import runtime
    from syntaxnmt.config import at_most_cores
    from syntaxnmt.cpu import machine, threads

    monkeypatch.setattr(runtime, "usable_cpus", lambda: range(3))
    assert runtime.cpu_cores() == threads.cpu_cores() == at_most_cores(16) == 3
    assert machine.machine_info()["usable_cpus"] == 3


def test_importing_the_config_does_not_load_torch():
    """runtime (which the config reads the usable cores from) imports torch only to resolve a device."""
    probe = "import sys, syntaxnmt.config; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
def test_a_full_disk_behind_standard_output_is_one_line_naming_it(tmp_path, unbuffered):
    """``syntaxnmt evaluate ... > /dev/full``: one line naming the standard output and exit 2,
    whether Python writes each print at once (PYTHONUNBUFFERED) or at the end (it was a bare
    ``[Errno 28]``, or Python's "Exception ignored" and exit 120)."""
    text = tmp_path / "h.txt"
    text.write_text("the cat sat .\na dog .\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "syntaxnmt", "evaluate", "--hyp", str(text), "--ref", str(text)], stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and proc.stderr == "syntaxnmt: error: cannot write standard output (/dev/full): No space left on device\n", proc.stderr


def test_a_reader_gone_from_standard_output_ends_the_command_quietly(tmp_path):
    """``syntaxnmt evaluate ... | head -0``: the closed pipe ends the command with 0 and nothing on
    standard error (Python's "Exception ignored ... BrokenPipeError" and exit 120 before)."""
    text = tmp_path / "h.txt"
    text.write_text("the cat sat .\na dog .\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": ""}
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    try:
        proc = subprocess.run([sys.executable, "-m", "syntaxnmt", "evaluate", "--hyp", str(text), "--ref", str(text)], stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")
