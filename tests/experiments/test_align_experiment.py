"""``syntaxnmt align-experiment``: a set of attention-as-alignment systems trained, decoded and
scored (AER against gold links, BLEU) into one table, as the user runs it from the command line."""

from __future__ import annotations

import re

import yaml
from conftest import deep_merge, tiny_tree
from test_cli import assert_one_line_error, run_cli


def _write_set(tmp_path, corpus, eflomal: bool = False, variant_system: str = "plain") -> tuple:
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
    }
    path = tmp_path / "align.set.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, tmp_path / "results.md"


def _rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 9 and not set(cells[0]) <= {"-"}:
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
        updates, bleu, aer, precision, recall = rows[label][2], rows[label][4], *rows[label][5:8]
        assert int(updates) == 12
        assert 0.0 <= float(bleu) <= 100.0
        for value in (aer, precision, recall):
            assert 0.0 <= float(value) <= 100.0
    assert re.fullmatch(r"\d+\.\d\d", rows["plain + coverage penalty"][4])
    # A second run reuses the trained systems (their done.json) and writes the same table.
    code, out, err = run_cli(capsys, "align-experiment", path)
    assert code == 0, err[-2000:]
    assert "trained already" in out + err
    assert _rows(results.read_text())["plain"][2:8] == rows["plain"][2:8]


def test_a_decode_variant_of_an_unknown_system_is_a_one_line_error(corpus, tmp_path, capsys):
    path, _ = _write_set(tmp_path, corpus, variant_system="nonexistent")
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, "names an unknown system 'nonexistent'")
