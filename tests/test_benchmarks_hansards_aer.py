"""benchmarks/hansards_aer.py in pieces (issue 22): a deadline or a signal stops every model at an
update boundary with no result for it, the same command continues from ``last.pt``, and a finished
model's result is reused while its options match. On a tiny stand-in for the shared data (a
word-for-word en->fr corpus in the layout of ``$SYNTAXNMT_DATA``), with the script's own model."""

from __future__ import annotations

import argparse
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


def started_workers(data: Path, work: Path) -> tuple[subprocess.Popen, list[str]]:
    """The script with ``--jobs 2``, once both worker processes train (and 3 s more); the lines it printed so far."""
    proc = run_script(data, work)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if sum(" starting a new run" in x for x in lines) == 2:
            break
    time.sleep(3)
    return proc, lines


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
    proc, lines = started_workers(data, work)
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 143, err[-2000:]
    assert "unfinished (SIGTERM)" in out and err.strip().splitlines()[-1].startswith("syntaxnmt: interrupted by SIGTERM: 2 model(s) unfinished")
    check_stopped(work, out, err)


@pytest.mark.slow
def test_jobs_2_a_worker_killed_outright_is_a_one_line_error_and_the_other_stops(data, tmp_path):
    """A worker process that dies without a word (SIGKILL, as the out-of-memory killer sends) ends
    the run with one error line naming the model(s), exit status 1 and no traceback; the pool ends
    the other worker too, so every model is left at its last saved last.pt, without a result."""
    work = tmp_path / "w"
    proc, lines = started_workers(data, work)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    workers = [int(c) for c in children if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(workers) >= 2, children
    os.kill(workers[0], signal.SIGKILL)
    rest, err = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 1, err[-2000:]
    assert "Traceback" not in err and "Traceback" not in out
    errors = [x for x in err.splitlines() if x.startswith("syntaxnmt: error: ")]
    assert len(errors) == 1 and "its --jobs worker process died" in errors[0] and "re-run the same command" in errors[0], err[-2000:]
    assert "unfinished (a worker process died)" in out
    died = re.findall(r"^(plain|guided): its --jobs worker process died \((its last.pt: update \d+|before its first last.pt)\); re-run", out, re.M)
    assert len(died) == 2, out
    for name, folder in (("plain", "run"), ("guided", "run-guided")):
        assert not (work / folder / "result.json").exists()


# ---------------------------------------------------------------------------------------------
# guided-full-leaky-gdfa: the guided-full-leaky model, a French->English twin guided by eflomal's
# links transposed, the two directions symmetrized with grow-diag-final-and
# ---------------------------------------------------------------------------------------------


def options(work: Path, variants: str, **extra) -> argparse.Namespace:
    defaults = {"work": str(work), "steps": 6, "minutes": 15.0, "threads": 1, "variants": variants, "normalizers": "softmax", "dev_pairs": 4, "bleu": False, "hard_decode": False, "self_reading": "best", "jobs": 1}
    return argparse.Namespace(**(defaults | extra))


def test_the_joint_variant_adds_the_twin_and_scores_after_both_the_other_folders_keep_their_names(ha, tmp_path):
    work = tmp_path / "w"
    tasks = ha.tasks_for(options(work, "guided,guided-full-leaky-gdfa"))
    assert [t["name"] for t in tasks] == ["guided", "guided-full-leaky", "guided-full-leaky, French->English twin", "guided-full-leaky-gdfa"]
    forward, twin, joint = tasks[1:]
    assert forward["hidden"] and forward["variant"] == "guided-full-leaky" and not forward.get("reverse")  # the guided-full-leaky run, not a second one
    assert twin == {"name": "guided-full-leaky, French->English twin", "variant": "guided-full-leaky", "normalizer": "softmax", "reverse": True, "seed": 1}
    assert joint["after"] == ["guided-full-leaky", "guided-full-leaky, French->English twin"]
    folders = [ha.result_path(work, t).parent.name for t in tasks]
    assert folders == ["run-guided", "run-guided-full-leaky", "run-guided-full-leaky-reverse", "run-guided-full-leaky-gdfa"]
    # Asked for itself, guided-full-leaky is one shown task; the self variant's tasks are as before.
    tasks = ha.tasks_for(options(work, "plain,guided-full-leaky,self,guided-full-leaky-gdfa"))
    assert [(t["name"], t.get("hidden", False)) for t in tasks] == [
        ("plain", False),
        ("guided-full-leaky", False),
        ("plain, French->English twin", False),
        ("self", False),
        ("guided-full-leaky, French->English twin", False),
        ("guided-full-leaky-gdfa", False),
    ]
    names = {(v, n, r): ha.run_folder(work, v, n, r).name for v, n, r in [("plain", "softmax", False), ("plain", "sparsemax", False), ("plain", "softmax", True), ("guided", "softmax", False), ("guided-full-leaky", "softmax", False), ("self", "softmax", False)]}
    assert list(names.values()) == ["run", "run-sparsemax", "run-reverse", "run-guided", "run-guided-full-leaky", "run-self"]
    # The plain twin's config as before; the guided twin: the sides swapped, the transposed labels, its own prepared data.
    args = options(work, "plain")
    plain_twin = ha.config_tree(work, args, "plain", reverse=True)["data"]
    assert plain_twin["prepared_dir"] == f"{work.as_posix()}/data-reverse" and "train_align" not in plain_twin
    d = ha.config_tree(work, args, "guided-full-leaky", reverse=True)["data"]
    assert (d["train_src"], d["train_tgt"], d["src_lang"], d["tgt_lang"]) == (f"{work.as_posix()}/corpus/train.fr", f"{work.as_posix()}/corpus/train.en", "fr", "en")
    assert (d["train_align"], d["prepared_dir"]) == (f"{work.as_posix()}/eflomal-reverse.train.align", f"{work.as_posix()}/data-eflomal-reverse")
    assert ha.config_tree(work, args, "guided-full-leaky")["data"]["train_align"] == f"{work.as_posix()}/eflomal.train.align"
    # The joint result's key is its two models' keys.
    key = ha.result_key(work, args, joint)
    assert key["forward"] == ha.result_key(work, args, forward) and key["reverse"] == ha.result_key(work, args, twin)


def test_the_twins_labels_are_the_forward_labels_transposed(ha, tmp_path, monkeypatch):
    work = tmp_path / "w"
    (work / "corpus").mkdir(parents=True)
    # Sentences of different lengths (a link not transposed would be out of range), a pair with an empty side.
    en = ["the cat", "", "a big dog eats"]
    fr = ["le petit chat voit", "un chien", "un chien mange"]
    (work / "corpus" / "train.en").write_text("".join(x + "\n" for x in en), encoding="utf-8")
    (work / "corpus" / "train.fr").write_text("".join(x + "\n" for x in fr), encoding="utf-8")
    (work / "eflomal.train.align").write_text("0-0 1-2 1p3\n\n0-0 2-1 3-2\n", encoding="utf-8")
    args = options(work, "guided-full-leaky-gdfa")
    cfg = ha.load_config(ha.write_config(work, args, "guided-full-leaky", reverse=True))
    logged = []
    path = ha.reverse_labels(work, args, "guided-full-leaky", cfg, logged.append)
    assert path == work / "eflomal-reverse.train.align" and len(logged) == 1
    assert path.read_text(encoding="utf-8") == "0-0 2-1 3p1\n\n0-0 1-2 2-3\n"  # French word first
    # Each link names a word of the twin's source (French) and target (English) sentence.
    for (i, j), src, tgt in ((link, f, e) for line, f, e in zip(ha.read_alignments(path), fr, en) for link in line[1]):
        assert i < len(src.split()) and j < len(tgt.split())
    ha.reverse_labels(work, args, "guided-full-leaky", cfg, logged.append)
    assert len(logged) == 1  # up to date: not written again
    (work / "eflomal.train.align").write_text("1-0\n\n0-0\n", encoding="utf-8")  # other labels: written again
    ha.reverse_labels(work, args, "guided-full-leaky", cfg, logged.append)
    assert path.read_text(encoding="utf-8") == "0-1\n\n0-0\n"
    (work / "eflomal.train.align").write_text("0-0\n\n0-0\n", encoding="utf-8")
    monkeypatch.setattr(ha, "saved_step", lambda run: 5)  # the twin trained on the earlier labels
    with pytest.raises(UserError, match=r"run-guided-full-leaky-reverse/last.pt was trained on other labels than the transpose of"):
        ha.reverse_labels(work, args, "guided-full-leaky", cfg, logged.append)


def test_the_joint_variant_end_to_end_symmetrizes_both_directions_and_is_reused(ha, data, tmp_path, monkeypatch, capsys):
    from syntaxnmt.alignment.extract import model_alignments

    work = tmp_path / "w"
    run = ["--work", str(work), "--steps", "6", "--dev-pairs", "4", "--variants", "guided-full-leaky-gdfa", "--output", str(tmp_path / "r.json")]
    results = ha.main(run)
    out = capsys.readouterr().out
    assert list(results["models"]) == ["guided-full-leaky", "guided-full-leaky, French->English twin", "guided-full-leaky-gdfa"]
    # The twin trained on the transposed labels, on its own prepared data.
    forward_labels = ha.read_alignments(work / "eflomal.train.align")
    assert [s for s, _ in ha.read_alignments(work / "eflomal-reverse.train.align")] == [{(j, i) for i, j in s} for s, _ in forward_labels]
    twin_cfg = ha.load_config(work / "run-guided-full-leaky-reverse" / "config.yaml")
    assert twin_cfg.data.train_align.endswith("eflomal-reverse.train.align") and (work / "data-eflomal-reverse").is_dir()
    assert load_checkpoint(work / "run-guided-full-leaky-reverse" / "last.pt")["progress"]["step"] == 6
    joint = results["models"]["guided-full-leaky-gdfa"]
    null_key, renormalized_key = "configured: layer -2 full context, head 0, leak as null", "configured, leak renormalized: layer -2 full context, head 0"
    assert list(joint["readings"]) == [null_key, renormalized_key] and list(joint["reverse_readings"]) == [null_key, renormalized_key]
    assert joint["training"]["forward"] == results["models"]["guided-full-leaky"]["training"] and joint["training"]["reverse"]["updates"] == 6
    # The scores are those of the library's symmetrized model alignments (the twin's links transposed there).
    split = ha.GoldSplit(work, 4)
    test_en, test_fr, gold = split.test()
    forward, twin = work / "run-guided-full-leaky" / "last.pt", work / "run-guided-full-leaky-reverse" / "last.pt"
    for key, null in ((null_key, None), (renormalized_key, False)):
        both = model_alignments(forward, test_en, test_fr, torch.device("cpu"), reverse_checkpoint=twin, null=null)
        assert joint["readings"][key] == ha.score(gold, both)
        alone = model_alignments(twin, test_fr, test_en, torch.device("cpu"), null=null)
        assert joint["reverse_readings"][key] == ha.score(gold, [{(j, i) for i, j in links} for links in alone])
    stored = json.loads((work / "run-guided-full-leaky-gdfa" / "result.json").read_text())
    assert stored["result"] == json.loads(json.dumps(joint)) and stored["key"]["reverse"]["config"]["work_dir"].endswith("run-guided-full-leaky-reverse")
    assert "| guided + full context + leaky, both directions (gdfa; 6 + 6 updates) | each direction's configured reading (layer -2 full context, head 0, leak as null), grow-diag-final-and |" in out
    assert "| guided + full context + leaky, French->English twin alone (6 updates) | configured reading, leak renormalized (layer -2 full context, head 0), links transposed |" in out
    assert "| guided-full-leaky (6 updates)" not in out  # hidden: not asked for

    def refuse(*a, **k):
        raise AssertionError("a finished model was trained or scored again")

    for name in ("train", "evaluate", "joint_links", "run_eflomal", "align_external"):
        monkeypatch.setattr(ha, name, refuse)
    again = ha.main(run)
    assert capsys.readouterr().out.count("result reused") == 3 and again["models"] == results["models"]


# --seed (issue 53): another seed trains beside seed 1, the links of every scored model are kept
# ---------------------------------------------------------------------------------------------


def test_seed_trains_in_its_own_folders_and_keeps_the_links_that_rescore_it(ha, data, tmp_path, monkeypatch, capsys):
    work = tmp_path / "w"
    one = ha.main(argv(work))
    two = ha.main(argv(work, "--seed", "2"))
    capsys.readouterr()
    configs = {name: ha.load_config(work / name / "config.yaml") for name in ("run", "run-seed2")}
    assert (configs["run"].seed, configs["run-seed2"].seed) == (1, 2)
    assert configs["run-seed2"].data.prepared_dir == configs["run"].data.prepared_dir  # shared data
    weights = [load_checkpoint(work / name / "last.pt")["model"] for name in ("run", "run-seed2")]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # another initialization
    assert json.loads((work / "run" / "result.json").read_text())["result"] == json.loads(json.dumps(one["models"]["plain"]))  # seed 1 untouched
    # The kept links give back every reading's AER without the model.
    split = ha.GoldSplit(work, 4)
    gold = split.test()[2]
    for name, results in (("run", one), ("run-seed2", two)):
        kept = json.loads((work / name / ha.LINKS_FILE).read_text())
        assert kept["test_lines"] == [5, 10]
        readings = results["models"]["plain"]["readings"]
        assert list(kept["readings"]) == list(readings)
        for reading, lines in kept["readings"].items():
            assert ha.score(gold, [ha.parse_links(line)[0] for line in lines]) == readings[reading]
    # A result stored before the links were kept (no "kept" in its key) is scored again, not retrained.
    stored = json.loads((work / "run" / "result.json").read_text())
    del stored["key"]["kept"]
    (work / "run" / "result.json").write_text(json.dumps(stored))
    (work / "run" / ha.LINKS_FILE).unlink()
    again = ha.main(argv(work))
    out = capsys.readouterr().out
    assert "result reused" not in out and "resumed " in out and (work / "run" / ha.LINKS_FILE).is_file()
    assert again["models"]["plain"]["readings"] == one["models"]["plain"]["readings"]
    # The seeds' table reads them (and eflomal's links) with no model.
    seeds = load_script(ROOT / "benchmarks" / "hansards_seeds.py", "hansards_seeds")
    monkeypatch.setattr(seeds.hansards_aer, "DATA", data)
    text = seeds.table(work, [1, 2], "plain", bootstrap=20)
    reading = "configured: all layers, heads averaged"
    aers = [r["readings"][reading]["aer"] for r in (one["models"]["plain"], two["models"]["plain"])]
    row = next(line for line in text.splitlines() if line.startswith(f"| plain | {reading} |"))
    assert f"| {aers[0]:.2f} / {aers[1]:.2f} |" in row and f"{sum(aers) / 2:.2f} ± " in row
    assert f"| {one['eflomal']['grow-diag-final-and']['aer']:.2f} |" in text.splitlines()[4]
    with pytest.raises(UserError, match="seed 3 of plain is not scored yet"):
        seeds.table(work, [1, 3], "plain", bootstrap=20)
    # collect: the files to commit give the same table with no run folder (and name what is missing).
    dest = tmp_path / "results"
    written = seeds.collect(work, dest, [1, 2], "plain", steps=None)
    assert sorted(str(p.relative_to(dest)) for p in written) == sorted(["eflomal-gold.json", f"run/{ha.LINKS_FILE}", f"run-seed2/{ha.LINKS_FILE}"])
    assert seeds.table(dest, [1, 2], "plain", bootstrap=20).replace(str(dest), "W") == text.replace(str(work), "W")
    with pytest.raises(UserError, match="run-seed3/test-links.json not found"):
        seeds.collect(work, dest, [1, 3], "plain", steps=None)
    with pytest.raises(UserError, match="seed1-2000.json not found"):
        seeds.collect(work, tmp_path / "r2", [1, 2], "plain", steps=2000)
    assert not (tmp_path / "r2").exists()  # nothing half-copied
    with pytest.raises(UserError, match="is the working folder itself"):
        seeds.collect(work, work, [1, 2], "plain", steps=None)


def test_seed_names_every_folder_of_the_joint_variant_and_its_self_labels(ha, tmp_path):
    work = tmp_path / "w"
    tasks = ha.tasks_for(options(work, "guided-full-leaky-gdfa", seed=2))
    assert [ha.result_path(work, t).parent.name for t in tasks] == ["run-guided-full-leaky-seed2", "run-guided-full-leaky-reverse-seed2", "run-guided-full-leaky-gdfa-seed2"]
    args = options(work, "self", seed=3)
    tree = ha.config_tree(work, args, "self")
    assert tree["seed"] == 3 and tree["work_dir"].endswith("run-self-seed3") and tree["data"]["train_align"].endswith("self-seed3.train.align")
    assert ha.config_tree(work, options(work, "guided-full-leaky", seed=3), "guided-full-leaky")["data"]["train_align"].endswith("/eflomal.train.align")  # eflomal's labels are shared
    with pytest.raises(UserError, match="--seed -1"):
        ha.main(argv(work, "--seed", "-1"))


def test_seeds_table_states_the_power_and_the_aa_check_of_the_first_rows_seeds(data, tmp_path, monkeypatch):
    """Issue 50 under the Hansards table: made-up kept links (no model) of four seeds. The plain
    model's configured reading (the first row) has AER 0, 5.x, ~94, ~88 by seed; every other row
    the same links on every seed (s_opt 0), so lines taken from another row or from eflomal (one
    run) would read differently. Split 2 + 2, only {0, 5.x} vs {~94, ~88} is a difference: Welch 1/3."""
    import statistics

    from syntaxnmt.metrics import minimum_detectable_difference

    seeds = load_script(ROOT / "benchmarks" / "hansards_seeds.py", "hansards_seeds")
    monkeypatch.setattr(seeds.hansards_aer, "DATA", data)
    ha = seeds.hansards_aer
    gold_lines = (data / "alignment" / "enfr-hansards" / "enfr.gold").read_text().splitlines()
    gold = [[(int(i) - 1, int(j) - 1) for i, j in (x.split("-") for x in line.split())] for line in gold_lines]
    test = gold[4:]  # test_lines 5-10: the test part after 4 dev pairs
    dropped = [links[:-1] if k < 3 else links for k, links in enumerate(test)]  # 3 links fewer
    one, two = [[links[0]] if k == 0 else [] for k, links in enumerate(test)], [links[:1] if k < 2 else [] for k, links in enumerate(test)]
    plain = {1: test, 2: dropped, 3: one, 4: two}
    same = [[] if k == 0 else links for k, links in enumerate(test)]
    work = tmp_path / "w"
    work.mkdir()
    (work / "eflomal-gold.json").write_text(json.dumps({"eflomal": {"grow-diag-final-and": {"links": gold}}}))
    configured = "configured: all layers, heads averaged"
    for seed in plain:
        for task, readings in (("plain", {configured: plain[seed], "layer 0 heads averaged": same}), ("guided-full-leaky-gdfa", {"configured: layer 1, head 0": same})):
            folder = ha.task_folder(work, {"variant": task, "normalizer": "softmax", "seed": seed})
            folder.mkdir()
            kept = {"test_lines": [5, 10], "readings": {r: [" ".join(f"{i}-{j}" for i, j in links) for links in hyp] for r, hyp in readings.items()}}
            (folder / ha.LINKS_FILE).write_text(json.dumps(kept))
    aers = [ha.score([(set(g), set(g)) for g in test], [set(x) for x in plain[s]])["aer"] for s in plain]
    assert aers[0] == 0 and 5 < aers[1] < 6 and aers[2] > 90 and 85 < aers[3] < 90
    text = seeds.table(work, [1, 2, 3, 4], bootstrap=50)
    sd = statistics.stdev(aers)
    power = next(line for line in text.splitlines() if line.startswith("Power (AER)"))
    assert power.startswith(f"Power (AER): with 4 seeds of 'plain, {configured}' and 4 seeds per other row, ")
    assert f"test {minimum_detectable_difference(sd, 4, 4):.2f} AER (s_opt {sd:.2f})" in power
    aa = next(line for line in text.splitlines() if line.startswith("A/A check (AER"))
    assert aa.startswith(f"A/A check (AER, calibration): the 4 seeds of 'plain, {configured}' split every way into two groups of 2 and 2 (3 splits;")
    assert "test: Welch over seeds 1/3 (33 %)" in aa
    assert "the power and A/A lines of AER on the first model row's seeds" in text.splitlines()[0]
    # Three seeds: the power of 3 against 3; no A/A check (it takes 4). One seed: no lines.
    three = seeds.table(work, [1, 2, 3], bootstrap=50)
    sd3 = statistics.stdev(aers[:3])
    assert f"test {minimum_detectable_difference(sd3, 3, 3):.2f} AER (s_opt {sd3:.2f})" in three
    assert f"A/A check (AER, calibration): not possible with 3 seeds of 'plain, {configured}'" in three
    single = seeds.table(work, [1], bootstrap=50)
    assert "Power (" not in single and "A/A" not in single and "Under the table" not in single


@pytest.mark.parametrize(
    ("folder", "seeds", "variants"),
    [("results/hansards-aer-2k", [1, 2, 3], "plain,guided-full-leaky-gdfa"), ("results/hansards-aer-8k", [1], "guided-full-leaky-gdfa")],
    ids=["2k-three-seeds", "8k-point"],
)
def test_the_seeds_tables_in_the_docs_are_the_ones_the_committed_links_give(monkeypatch, folder, seeds, variants):
    """docs/alignment.md's Hansards tables over seeds (2,000 updates) and at 8,000 updates are
    re-derived, byte for byte, from the links committed under ``folder`` and the shared gold set
    (skipped only without it)."""
    data = Path(os.environ.get("SYNTAXNMT_DATA", ROOT.parent / "shared" / "data"))
    if not (data / "alignment" / "enfr-hansards" / "enfr.gold").is_file():
        pytest.skip(f"the Hansards gold set is not under {data}")
    seeds_script = load_script(ROOT / "benchmarks" / "hansards_seeds.py", "hansards_seeds")
    monkeypatch.setattr(seeds_script.hansards_aer, "DATA", data)
    monkeypatch.chdir(ROOT)
    text = seeds_script.table(Path(folder), seeds, variants)
    assert "| guided-full-leaky-gdfa | configured: layer -2 full context, head 0, leak as null |" in text
    assert text in (ROOT / "docs" / "alignment.md").read_text(encoding="utf-8")
