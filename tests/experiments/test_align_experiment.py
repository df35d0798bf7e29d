"""``syntaxnmt align-experiment``: a set of attention-as-alignment systems trained, decoded and
scored (AER against gold links, BLEU) into one table, as the user runs it from the command line;
with ``seeds``, each system once per seed and the seed-aware statistics."""

from __future__ import annotations

import re
import statistics

import torch
import yaml
from conftest import deep_merge, tiny_tree
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.alignment.extract import model_alignments
from syntaxnmt.data.links import aer, read_alignments
from syntaxnmt.metrics import score
from syntaxnmt.textio import read_lines


def _write_set(tmp_path, corpus, eflomal: bool = False, variant_system: str = "plain", **extra) -> tuple:
    corpus_dir = corpus["train"]["src"].parent
    prepared = tmp_path / "data"
    base = tiny_tree(corpus, tmp_path / "plain", prepared)
    base["data"]["joint_vocab"] = True
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(base))
    coverage = deep_merge(base, {"name": "coverage", "work_dir": str(tmp_path / "coverage"), "train": {"alignment": {"coverage_weight": 0.1}}})
    (tmp_path / "coverage.yaml").write_text(yaml.safe_dump(coverage))
    spec = {
        "name": "tiny-align",
        "title": "Tiny alignment set",
        "configs": {"plain": "plain.yaml", "coverage": "coverage.yaml"},
        "decode_variants": {"plain + coverage penalty": {"system": variant_system, "decode": {"coverage_penalty": 0.2}}},
        "test": {"src": str(corpus_dir / "test.src"), "ref": str(corpus_dir / "test.tgt"), "align": str(corpus_dir / "test.align")},
        "eflomal_baseline": eflomal,
        "output": str(tmp_path / "results.md"),
        **extra,
    }
    path = tmp_path / "align.set.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, tmp_path / "results.md"


def _rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 15 and not set(cells[0]) <= {"-"}:
            rows[cells[0]] = cells
    return rows


def test_align_experiment_trains_scores_and_tabulates(corpus, tmp_path, capsys):
    path, results = _write_set(tmp_path, corpus, eflomal=True)
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert code == 0, err[-2000:]
    rows = _rows(results.read_text())
    assert {"plain", "coverage", "plain + coverage penalty"} <= set(rows)
    assert any(label.startswith("eflomal") for label in rows), sorted(rows)
    for label in ("plain", "coverage"):
        updates, bleu, error, precision, recall = rows[label][2], rows[label][4], *rows[label][8:11]
        assert int(updates) == 12
        assert 0.0 <= float(bleu) <= 100.0
        for value in (error, precision, recall):
            assert 0.0 <= float(value) <= 100.0
    assert re.fullmatch(r"\d+\.\d\d", rows["plain + coverage penalty"][4])
    # One run per system: no s_opt, no ASO; p-values against the first system (plain).
    assert rows["plain"][6] == rows["plain"][12] == "–" and rows["plain"][5].endswith(" / –")
    assert 0.0 < float(rows["coverage"][6].split()[0]) <= 1.0 and 0.0 < float(rows["coverage"][12].split()[0]) <= 1.0
    assert rows["coverage"][7] == rows["coverage"][13] == "–"
    # A second run reuses the trained systems (their done.json) and writes the same table.
    code, out, err = run_cli(capsys, "align-experiment", path)
    assert code == 0, err[-2000:]
    assert "trained already" in out + err
    assert _rows(results.read_text())["plain"][2:15] == rows["plain"][2:15]


def test_align_experiment_with_seeds_gives_mean_sd_and_seed_aware_tests(corpus, tmp_path, capsys):
    """``seeds: [1, 2]``: each system trains in ``<work_dir>-seed<S>``; BLEU and AER are the mean ± sd
    of the seeds' figures, and the second system is tested against the first over the seed pairs."""
    path, results = _write_set(tmp_path, corpus, seeds=[1, 2], shuffles=2000, bootstrap=200)
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert code == 0, err[-2000:]
    text = results.read_text()
    rows = _rows(text)
    corpus_dir = corpus["train"]["src"].parent
    src, ref = read_lines(corpus_dir / "test.src"), read_lines(corpus_dir / "test.tgt")
    gold = read_alignments(corpus_dir / "test.align", False, [len(x.split()) for x in src], [len(x.split()) for x in ref])
    for label in ("plain", "coverage"):
        works = [tmp_path / f"{label}-seed{s}" for s in (1, 2)]
        assert all((w / "done.json").is_file() for w in works)
        bleus = [score(read_lines(w / "test.hyp"), [ref], force=True).bleu for w in works]
        assert rows[label][4] == f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f}"
        assert rows[label][5].split(" / ")[1] == f"{statistics.stdev(bleus):.2f}"
        errors = [100 * aer([s for s, _ in gold], [p for _, p in gold], model_alignments(w / "best.pt", src, ref, torch.device("cpu"))).aer for w in works]
        assert rows[label][8] == f"{statistics.mean(errors):.1f} ± {statistics.stdev(errors):.1f}"
        assert rows[label][11].split(" / ")[1] == f"{statistics.stdev(errors):.1f}"
    assert not (tmp_path / "plain").exists()  # no unseeded run
    assert rows["plain"][6] == rows["plain"][12] == "–"
    assert 0.0 < float(rows["coverage"][6].split()[0]) <= 1.0 and 0.0 < float(rows["coverage"][12].split()[0]) <= 1.0
    assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", rows["plain + coverage penalty"][4])
    assert "Seeds: 1, 2" in text and "stratified over seed pairs" in text


def test_a_decode_variant_of_an_unknown_system_is_a_one_line_error(corpus, tmp_path, capsys):
    path, _ = _write_set(tmp_path, corpus, variant_system="nonexistent")
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, "names an unknown system 'nonexistent'")
