"""benchmarks/hansards_aer.py in pieces (issue 22): a deadline or a signal stops every model at an
update boundary with no result for it, the same command continues from ``last.pt``, and a finished
model's result is reused while its options match. On a tiny stand-in for the shared data (a
word-for-word en->fr corpus in the layout of ``$SYNTAXNMT_DATA``), with the script's own model."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import load_script

from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.errors import UserError
from syntaxnmt.training.train import SingleModel

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "hansards_aer.py"
LEXICON = {"the": "le", "cat": "chat", "dog": "chien", "sees": "voit", "a": "un", "house": "maison", "big": "grand", "small": "petit", "red": "rouge", "eats": "mange", "bird": "oiseau", "man": "homme"}


def write_data(root: Path) -> Path:
    """Multi30k-like ``multi30k/{train,val,test_2016_flickr}.{en,fr}.gz`` and a 10-pair gold set
    (``alignment/enfr-hansards``, 1-indexed diagonal links) of word-for-word translations."""
    rng = random.Random(0)

    def pair() -> tuple[str, str]:
        en = [rng.choice(list(LEXICON)) for _ in range(rng.randint(3, 7))]
        return " ".join(en), " ".join(LEXICON[w] for w in en)

    (root / "multi30k").mkdir(parents=True)
    for name, n in (("train", 120), ("val", 12), ("test_2016_flickr", 12)):
        pairs = [pair() for _ in range(n)]
        for side, lang in ((0, "en"), (1, "fr")):
            with gzip.open(root / "multi30k" / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in pairs))
    gold = root / "alignment" / "enfr-hansards"
    gold.mkdir(parents=True)
    pairs = [pair() for _ in range(10)]
    (gold / "enfr.src-tgt").write_text("".join(f"{e} ||| {f}\n" for e, f in pairs), encoding="utf-8")
    (gold / "enfr.gold").write_text("".join(" ".join(f"{i}-{i}" for i in range(1, len(e.split()) + 1)) + "\n" for e, _ in pairs), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("hansards-data"))


@pytest.fixture
def ha(data, monkeypatch):
    """The script as a module, reading the tiny data."""
    module = load_script(SCRIPT)
    monkeypatch.setattr(module, "DATA", data)
    monkeypatch.setattr(module, "POLL_SECONDS", 0.05)
    return module


def test_until_is_today_or_tomorrow_and_the_earlier_limit_wins(ha):
    now = dt.datetime(2026, 11, 25, 3, 0)
    assert ha.parse_until("04:40", now) == dt.datetime(2026, 11, 25, 4, 40).timestamp()
    assert ha.parse_until("02:59", now) == dt.datetime(2026, 11, 26, 2, 59).timestamp()
    with pytest.raises(UserError, match="--until 4h40"):
        ha.parse_until("4h40", now)
    start = now.timestamp()
    args = type("A", (), {"until": "04:40", "max_wall_minutes": 30.0})()
    assert ha.deadline_of(args, start) == start + 1800
    args.max_wall_minutes = 120.0
    assert ha.deadline_of(args, start) == dt.datetime(2026, 11, 25, 4, 40).timestamp()
    args.until, args.max_wall_minutes = None, None
    assert ha.deadline_of(args, start) is None


def argv(work: Path, *extra: str) -> list[str]:
    return ["--work", str(work), "--steps", "6", "--dev-pairs", "4", "--variants", "plain", *extra]


def stop_after_update(ha, monkeypatch, n: int) -> dict:
    """The deadline passes (the script's clock jumps a day) right after update ``n``; the update
    then waits for the watcher's signal, so training stops at update ``n`` exactly."""
    clock = {"offset": 0.0}
    monkeypatch.setattr(ha, "_now", lambda: time.time() + clock["offset"])
    original = SingleModel.update

    def update(self, group, step):
        stats = original(self, group, step)
        if step + 1 == n and clock["offset"] == 0:
            clock["offset"] = 86400.0
            time.sleep(20 * ha.POLL_SECONDS)
        return stats

    monkeypatch.setattr(SingleModel, "update", update)
    return clock


def test_a_deadline_leaves_no_result_the_rerun_resumes_and_a_third_run_reuses_the_result(ha, data, tmp_path, monkeypatch, capsys):
    work = tmp_path / "w"
    stop_after_update(ha, monkeypatch, 3)
    results = ha.main(argv(work, "--max-wall-minutes", "60", "--output", str(tmp_path / "r.json")))
    out = capsys.readouterr().out
    assert "plain: stopped at update 3 of 6; re-run the same command to continue" in out
    assert results["models"] == {} and results["unfinished"]["plain"]["reason"] == "deadline"
    assert not (work / "run" / "result.json").exists() and not (tmp_path / "r.json").exists()  # nothing for a partial model
    assert "| plain" not in out  # not scored
    assert load_checkpoint(work / "run" / "last.pt")["progress"]["step"] == 3
    monkeypatch.undo()
    monkeypatch.setattr(ha, "DATA", data)

    results = ha.main(argv(work, "--output", str(tmp_path / "r.json")))
    out = capsys.readouterr().out
    assert "plain: continues from update 3 of 6" in out and "resumed " in out and "at update 3 (" in out
    assert results["models"]["plain"]["training"]["updates"] == 6 and "unfinished" not in results
    stored = json.loads((work / "run" / "result.json").read_text())
    assert stored["result"] == json.loads(json.dumps(results["models"]["plain"]))
    assert json.loads((tmp_path / "r.json").read_text())["models"]["plain"] == stored["result"]
    assert "| plain (6 updates) | configured: all layers, heads averaged |" in out

    def refuse(*a, **k):
        raise AssertionError("a finished model was trained or scored again")

    monkeypatch.setattr(ha, "train", refuse)
    monkeypatch.setattr(ha, "evaluate", refuse)
    monkeypatch.setattr(ha, "run_eflomal", refuse)  # eflomal's links are kept in the working folder too
    again = ha.main(argv(work, "--threads", "2"))  # the thread count does not change the result
    assert "result reused" in capsys.readouterr().out and again["models"] == results["models"]
    assert again["eflomal"] == results["eflomal"]

    monkeypatch.undo()
    monkeypatch.setattr(ha, "DATA", data)
    other = ha.main(argv(work, "--dev-pairs", "3"))  # another scoring option: scored again, not retrained
    out = capsys.readouterr().out
    assert "result reused" not in out and "resumed " in out and other["models"]["plain"]["training"]["updates"] == 6
    assert json.loads((work / "run" / "result.json").read_text())["key"]["dev_pairs"] == 3

    # The stop at update 3 and the resume give the model an uninterrupted run gives.
    ha.main(argv(tmp_path / "straight"))
    resumed, straight = (load_checkpoint(w / "run" / "last.pt")["model"] for w in (work, tmp_path / "straight"))
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


def test_fewer_steps_than_the_saved_run_is_a_one_line_error(ha, tmp_path, monkeypatch, capsys):
    work = tmp_path / "w"
    stop_after_update(ha, monkeypatch, 4)
    ha.main(argv(work, "--max-wall-minutes", "60"))
    capsys.readouterr()
    with pytest.raises(UserError, match=r"run/last.pt: 4 updates made, more than --steps 2"):
        ha.main(["--work", str(work), "--steps", "2", "--dev-pairs", "4"])


def run_script(data: Path, work: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "SYNTAXNMT_DATA": str(data), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), "--work", str(work), "--steps", "100000", "--dev-pairs", "4", "--variants", "plain,guided", "--jobs", "2", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def check_stopped(work: Path, out: str, err: str) -> None:
    """One line per model, no result for either, ``last.pt`` at the update the line names."""
    assert "Traceback" not in err and "Traceback" not in out
    for name, folder in (("plain", "run"), ("guided", "run-guided")):
        line = re.search(rf"^{name}: (stopped at update (\d+) of 100000|not started); re-run the same command to continue$", out, re.M)
        assert line, out
        step = int(line.group(2) or 0)
        assert step == (load_checkpoint(work / folder / "last.pt")["progress"]["step"] if step else 0)
        assert not (work / folder / "result.json").exists()


@pytest.mark.slow
def test_jobs_2_the_deadline_reaches_the_workers(data, tmp_path):
    t0 = time.monotonic()
    proc = run_script(data, tmp_path / "w", "--max-wall-minutes", "0.4")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "unfinished (deadline)" in out
    check_stopped(tmp_path / "w", out, err)
    assert time.monotonic() - t0 < 24 + 60  # 100,000 updates were asked for: the workers stopped near the deadline


@pytest.mark.slow
def test_jobs_2_sigterm_to_the_script_stops_the_workers_at_an_update(data, tmp_path):
    work = tmp_path / "w"
    proc = run_script(data, work)
    lines = []
    for line in proc.stdout:  # until both workers train
        lines.append(line)
        if sum(" starting a new run" in x for x in lines) == 2:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 143, err[-2000:]
    assert "unfinished (SIGTERM)" in out and err.strip().splitlines()[-1].startswith("syntaxnmt: interrupted by SIGTERM: 2 model(s) unfinished")
    check_stopped(work, out, err)
