"""benchmarks/side_by_side.py keeps every toolkit's figures in one results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sbs():
    return load_script(ROOT / "benchmarks" / "side_by_side.py")


def run(toolkit: str, tok_s: float, date: str) -> dict:
    figures = dict.fromkeys(("train_tok_s", "decode_sent_s", "decode_sent_s_wall", "train_peak_mb", "decode_peak_mb"), tok_s)
    return {"toolkit": toolkit, "repeat": 1, "tokens_per_update": 3500, "params": 7, "date": date, **figures}


def test_a_subset_run_keeps_the_other_toolkits_figures(sbs, tmp_path):
    setting = {"tiny": False, "updates": 100}
    path = tmp_path / "side_by_side.json"
    first = {"command": "a", "date": "d1", "toolkits": ["fairseq", "onmt", "syntaxnmt"], "machine": {}}
    runs, errors, inv = sbs.merge_runs(None, [run("fairseq", 1000, "d1"), run("onmt", 1500, "d1"), run("syntaxnmt", 2000, "d1")], {}, first)
    path.write_text(json.dumps({"setting": setting, "runs": runs, "errors": errors, "invocations": inv}))

    second = {"command": "b", "date": "d2", "toolkits": ["syntaxnmt"], "machine": {}}
    previous = sbs.read_previous(path, setting)
    runs, errors, inv = sbs.merge_runs(previous, [run("syntaxnmt", 3000, "d2")], {}, second)
    by_toolkit = {r["toolkit"]: (r["train_tok_s"], r["date"]) for r in runs}
    assert by_toolkit == {"fairseq": (1000, "d1"), "onmt": (1500, "d1"), "syntaxnmt": (3000, "d2")}
    assert [i["command"] for i in inv] == ["a", "b"]
    medians, ratios, _ = sbs.summarize(runs, ["fairseq", "onmt", "syntaxnmt"])
    assert ratios["onmt"]["train_tok_s"] == pytest.approx(2.0)

    # measured again on its own, the earlier invocation is no longer needed by any figure
    third = {"command": "c", "date": "d3", "toolkits": ["fairseq", "onmt"], "machine": {}}
    runs, _, inv = sbs.merge_runs({"runs": runs, "errors": errors, "invocations": inv}, [run("fairseq", 900, "d3"), run("onmt", 1400, "d3")], {}, third)
    assert [i["command"] for i in inv] == ["b", "c"] and len(runs) == 3


def test_a_file_of_another_setting_is_replaced(sbs, tmp_path):
    path = tmp_path / "side_by_side.json"
    path.write_text(json.dumps({"setting": {"tiny": True}, "runs": [run("onmt", 1, "d0")]}))
    assert sbs.read_previous(path, {"tiny": False}) is None
    assert sbs.read_previous(tmp_path / "missing.json", {"tiny": False}) is None
    runs, _, inv = sbs.merge_runs(None, [run("syntaxnmt", 2, "d1")], {}, {"command": "x", "date": "d1", "toolkits": ["syntaxnmt"]})
    assert [r["toolkit"] for r in runs] == ["syntaxnmt"] and len(inv) == 1


DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
import side_by_side as sbs
from pathlib import Path
sbs.stop_on_sigterm()
child = [sys.executable, "-c", "import os, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)".replace("sys.argv[1]", repr(sys.argv[2]))]
sbs.run_measured(child, Path(sys.argv[3]), {}, Path.cwd())
"""


def test_sigterm_stops_the_toolkit_process_it_waits_for(tmp_path):
    """A benchmark stopped with SIGTERM (kill, pkill) kills the toolkit it was measuring instead
    of leaving it training beside the next measurement."""
    import os
    import signal
    import subprocess
    import sys
    import time

    driver, pid_file = tmp_path / "driver.py", tmp_path / "child.pid"
    driver.write_text(DRIVER)
    p = subprocess.Popen([sys.executable, str(driver), str(ROOT / "benchmarks"), str(pid_file), str(tmp_path / "child.log")], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):  # killed and reaped by the driver
        os.kill(child, 0)


def test_the_table_names_syntaxnmts_cpu_kernels_and_says_when_the_rounds_differ(sbs):
    # issue 48: a round on oneDNN peaks ~40 % above one on OpenBLAS; the kernels are the calibration's choice
    same = [run("onmt", 1500, "d1")] + [run("syntaxnmt", 2000, "d1") | {"repeat": r, "cpu_kernels": {"train": "onednn, row packing", "decode": "aten"}} for r in (1, 2)]
    lines = sbs.summarize(same, ["onmt", "syntaxnmt"])[2]
    assert lines[-1] == "syntaxnmt's CPU kernels (the calibration's choice): train onednn, row packing in 2 rounds; decode aten in 2 rounds"
    mixed = same[:2] + [same[2] | {"cpu_kernels": {"train": "openblas, row packing", "decode": "aten"}}]
    assert lines[-1] not in (line := sbs.summarize(mixed, ["onmt", "syntaxnmt"])[2][-1])
    assert "train onednn, row packing in 1 round, openblas, row packing in 1 round" in line and line.endswith("the training rounds differ: their peak memory is not comparable")
    # runs recorded before the kernels were (and the peers) add no line
    assert not sbs.summarize([run("onmt", 1500, "d1"), run("syntaxnmt", 2000, "d1")], ["onmt", "syntaxnmt"])[2][-1].startswith("syntaxnmt's CPU kernels")
