"""benchmarks/gpu/converged.py: runs of the converged study made on a GPU machine without spaCy --
test-set parses carried as CoNLL-U that read as the live pipeline's, the set copy that reads them
(the same runs as the committed set), and finished runs packed there and brought back here, where
the runner counts them as finished."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import load_script

from syntaxnmt.experiments.sets import is_finished, load_set, set_runs

ROOT = Path(__file__).resolve().parents[1]
converged = load_script(ROOT / "benchmarks" / "gpu" / "converged.py", "gpu_converged")


def test_bundle_parses_the_test_sources_into_conllu_that_reads_as_the_live_pipeline(tmp_path, monkeypatch):
    src = tmp_path / "t.en.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.write("A man in a blue shirt is standing on a ladder.\nTwo dogs play in the snow.\nSomething.\n")
    monkeypatch.setattr(converged, "test_sets", lambda: {"t": {"src": str(src)}})
    converged.bundle(tmp_path / "conllu")
    text = (tmp_path / "conllu" / "t.en.conllu").read_text(encoding="utf-8")
    assert text.count("\n\n") == 3 and "\tladder\t" in text and not (tmp_path / "conllu" / "t.en").exists()


def test_the_gpu_set_reads_the_conllu_parses_and_has_the_committed_sets_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the runs' work_dirs are relative
    target = converged.SET.with_name(f"test-{tmp_path.name}.set.yaml")  # beside the committed set: its configs are relative to it
    with pytest.raises(converged.Refused, match="converged.py bundle"):
        converged.write_gpu_set(tmp_path, target)
    names = list(converged.test_sets())
    for name in names:
        converged.conllu_of(name, tmp_path).write_text("", encoding="utf-8")
    try:
        converged.write_gpu_set(tmp_path, target)
        gpu, committed = load_set(target), load_set(converged.SET)
        assert {n: t.conllu for n, t in gpu.test_sets.items()} == {n: str(tmp_path / f"{n}.en.conllu") for n in names}
        key = lambda runs: [(r.label, r.seed, r.cfg.work_dir, r.cfg.train.max_steps, r.cfg.prepared_dir) for r in runs]  # noqa: E731
        assert key(set_runs(target, gpu, list(gpu.configs))) == key(set_runs(converged.SET, committed, list(committed.configs)))
        assert gpu.results_dir == committed.results_dir and len(set_runs(target, gpu, list(gpu.configs), [4])) == 5
    finally:
        target.unlink(missing_ok=True)


def test_finished_runs_are_packed_without_checkpoints_and_brought_back_as_finished(tmp_path, monkeypatch):
    gpu, cpu, out = tmp_path / "gpu", tmp_path / "cpu", tmp_path / "out"
    spec = load_set(converged.SET)
    runs = set_runs(converged.SET, spec, list(spec.configs), [4])
    monkeypatch.chdir(gpu.mkdir() or gpu)
    for run in runs[:3]:  # three finished, one stopped (last.pt only), one not started
        work = Path(run.cfg.work_dir)
        work.mkdir(parents=True)
        (work / "done.json").write_text(json.dumps({"steps": 6500}), encoding="utf-8")
        (work / "last.pt").write_bytes(b"checkpoint")
        (work / "valid.log").write_text("update 500 | dev loss 3.0 BLEU 12.0\n", encoding="utf-8")
        for name in spec.test_sets:
            (work / f"{name}.hyp").write_text(f"{run.label} {name}\n", encoding="utf-8")
    Path(runs[3].cfg.work_dir).mkdir(parents=True)
    (Path(runs[3].cfg.work_dir) / "last.pt").write_bytes(b"checkpoint")
    packed = converged.pack(out, converged.SET, root=gpu)
    assert sorted(map(str, packed)) == sorted(r.cfg.work_dir for r in runs[:3])
    assert not list(out.rglob("*.pt")) and len(list(out.rglob("*.hyp"))) == 3 * len(spec.test_sets)

    monkeypatch.chdir(cpu.mkdir() or cpu)
    assert sorted(map(str, converged.unpack(out, root=cpu))) == sorted(r.cfg.work_dir for r in runs[:3])
    assert [is_finished(r.cfg, spec) for r in runs] == [True, True, True, False, False]
    assert (Path(runs[0].cfg.work_dir) / "valid.log").read_text(encoding="utf-8").startswith("update 500")
    assert converged.unpack(out, root=cpu) == []  # already finished here: left as it is
