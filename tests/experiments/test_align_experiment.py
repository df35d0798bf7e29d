"""``syntaxnmt align-experiment``: a set of attention-as-alignment systems trained, decoded and
scored (AER against gold links, BLEU) into one table, as the user runs it from the command line;
with ``seeds``, each system once per seed and the seed-aware statistics."""

from __future__ import annotations

import re
import statistics

import torch
import yaml
from conftest import REFS, deep_merge, tiny_tree
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.alignment.extract import model_alignments
from syntaxnmt.alignment.sweep import align_sweep, reading_options
from syntaxnmt.alignment.symmetrize import symmetrize
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
        if line.startswith("|") and len(cells) == 17 and not set(cells[0]) <= {"-"}:
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
    # The seed-level cells: mean difference over seeds [two-level bootstrap CI]; Welch's p over the two seeds.
    assert rows["plain"][15] == rows["plain"][16] == "–"
    seed_level = r"[+-]\d+\.\d+ \[[+-]\d+\.\d+, [+-]\d+\.\d+\]; p (\d\.\d{4}|–)( \((better|worse)\))?"
    assert re.fullmatch(seed_level, rows["coverage"][15]) and re.fullmatch(seed_level, rows["coverage"][16]), rows["coverage"][15:]
    assert "two-level bootstrap" in text


def test_a_decode_variant_of_an_unknown_system_is_a_one_line_error(corpus, tmp_path, capsys):
    path, _ = _write_set(tmp_path, corpus, variant_system="nonexistent")
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, "names an unknown system 'nonexistent'")


def test_align_experiment_full_context_leaky_self_training_and_readings(corpus, tmp_path, capsys):
    """A guided full-context + leaky system, a self-trained one (its labels: the plain model's own
    alignments, each direction read with the better of its best shifted and best unshifted dev
    reading, symmetrized with its reverse twin's), and extra rows that read the plain
    model again (a fixed shifted layer/head; the best shifted reading on the dev split), each scored
    on test like ``align --shift --layer L --head H`` and with the plain model's BLEU."""
    corpus_dir = corpus["train"]["src"].parent
    base = deep_merge(tiny_tree(corpus, tmp_path / "plain", tmp_path / "data"), {"data": {"joint_vocab": True}, "model": {"dec_layers": 2}})
    guided = {"guided_weight": 1.0, "layer": -2, "head": 0, "full_context": True}
    leaky = deep_merge(base, {"work_dir": str(tmp_path / "leaky"), "data": {"train_align": str(corpus_dir / "train.align"), "prepared_dir": str(tmp_path / "data-gold")}, "train": {"alignment": {**guided, "leaky": True}}})
    reverse = deep_merge(base, {"work_dir": str(tmp_path / "reverse"), "data": {"prepared_dir": str(tmp_path / "data-reverse"), "src_lang": "syn", "tgt_lang": "en"}})
    for key, side in (("train_src", "tgt"), ("train_tgt", "src")):
        reverse["data"][key] = str(corpus["train"][side])
        reverse["data"][key.replace("train", "dev")] = str(corpus["dev"][side])
    labels = tmp_path / "self.train.align"
    self_trained = deep_merge(base, {"work_dir": str(tmp_path / "self"), "data": {"train_align": str(labels), "prepared_dir": str(tmp_path / "data-self")}, "train": {"alignment": guided}})
    for name, tree in (("plain", base), ("leaky", leaky), ("reverse", reverse), ("self", self_trained)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(tree))
    split = lambda s: {"src": str(corpus_dir / f"{s}.src"), "ref": str(corpus_dir / f"{s}.tgt"), "align": str(corpus_dir / f"{s}.align")}  # noqa: E731
    spec = {
        "name": "tiny-align-issue22",
        "configs": {"plain": "plain.yaml", "guided full leaky": "leaky.yaml", "self": "self.yaml"},
        "self_training": {"self": {"teacher": "plain", "reverse": "reverse.yaml"}},
        "readings": {"plain, layer 0 head 1 shifted": {"system": "plain", "shift": True, "layer": 0, "head": 1}, "plain, best shifted on dev": {"system": "plain", "shift": True}},
        "dev": split("dev"),
        "test": split("test"),
        "eflomal_baseline": True,
        "output": str(tmp_path / "results.md"),
    }
    path = tmp_path / "align.set.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    code, out, err = run_cli(capsys, "align-experiment", path)
    assert code == 0, err[-2000:]
    rows = _rows((tmp_path / "results.md").read_text())
    assert {"plain", "guided full leaky", "self", "plain, layer 0 head 1 shifted", "plain, best shifted on dev"} <= set(rows), sorted(rows)
    assert any(label.startswith("eflomal") for label in rows)
    assert rows["guided full leaky"][1] == "layer -2, head 0 (full-context pass), leaky (the leak read as null)"
    assert int(rows["guided full leaky"][2]) == int(rows["self"][2]) == 12

    cpu = torch.device("cpu")
    src, ref = read_lines(corpus_dir / "test.src"), read_lines(corpus_dir / "test.tgt")
    gold = read_alignments(corpus_dir / "test.align", False, [len(x.split()) for x in src], [len(x.split()) for x in ref])

    def aer_cell(links) -> str:
        return f"{100 * aer([s for s, _ in gold], [p for _, p in gold], links).aer:.1f}"

    # The leaky system's row reads its supervised head as align does by default: the leak as null.
    assert rows["guided full leaky"][8] == aer_cell(model_alignments(tmp_path / "leaky" / "best.pt", src, ref, cpu, null=True))
    plain = tmp_path / "plain" / "best.pt"
    assert rows["plain, layer 0 head 1 shifted"][8] == aer_cell(model_alignments(plain, src, ref, cpu, layer=0, head=1, shift=True))
    best, _ = align_sweep(plain, read_lines(corpus_dir / "dev.src"), read_lines(corpus_dir / "dev.tgt"), corpus_dir / "dev.align", cpu).best(shift=True)
    assert best.shift and rows["plain, best shifted on dev"][1] == f"{best.label} (best on dev)"
    assert rows["plain, best shifted on dev"][8] == aer_cell(model_alignments(plain, src, ref, cpu, **reading_options(best)))
    for label in ("plain, layer 0 head 1 shifted", "plain, best shifted on dev"):
        assert rows[label][4] == rows["plain"][4]  # the plain model's BLEU

    # The self-trained system's labels: the plain model's and its reverse twin's best readings on
    # dev (shifted or not, whichever has the lower dev AER), over the training corpus, symmetrized
    # with grow-diag-final-and; the row names them.
    train_src, train_tgt = read_lines(corpus["train"]["src"]), read_lines(corpus["train"]["tgt"])
    rev = tmp_path / "reverse" / "best.pt"
    fwd_best, fwd_result = align_sweep(plain, read_lines(corpus_dir / "dev.src"), read_lines(corpus_dir / "dev.tgt"), corpus_dir / "dev.align", cpu).best()
    rev_best, rev_result = align_sweep(rev, read_lines(corpus_dir / "dev.tgt"), read_lines(corpus_dir / "dev.src"), corpus_dir / "dev.align", cpu, transpose_gold=True).best()
    forward = model_alignments(plain, train_src, train_tgt, cpu, **reading_options(fwd_best))
    backward = model_alignments(rev, train_tgt, train_src, cpu, **reading_options(rev_best))
    expected = [symmetrize(f, {(i, j) for j, i in r}, "grow-diag-final-and") for f, r in zip(forward, backward)]
    written = read_alignments(labels, False, [len(x.split()) for x in train_src], [len(x.split()) for x in train_tgt])
    assert [s for s, _ in written] == expected and sum(map(len, expected)) > len(expected)
    assert "self-training labels, reverse model" in out + err
    note = f"labels from plain: forward {fwd_best.label} (dev AER {100 * fwd_result.aer:.1f}) + reverse {rev_best.label} (dev AER {100 * rev_result.aer:.1f}), best on dev"
    assert rows["self"][1] == f"layer -2, head 0 (full-context pass); {note}"
    # Labels written with another teacher reading than the set now asks for are not reused silently.
    spec["self_training"]["self"]["reading"] = "shifted"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, str(labels), "teacher reading 'best'", "asks for 'shifted'")
    # Labels without the record were written before the choice existed, from the shifted readings.
    labels.with_name(labels.name + ".json").unlink()
    spec["self_training"]["self"]["reading"] = "best"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, str(labels), "teacher reading 'shifted' (no self.train.align.json", "asks for 'best'")


def test_an_unknown_self_training_reading_is_a_one_line_error_at_set_load(corpus, tmp_path, capsys):
    split = {"src": "d.src", "ref": "d.tgt", "align": "d.align"}
    path, _ = _write_set(tmp_path, corpus, dev=split, self_training={"coverage": {"teacher": "plain", "reverse": "plain.yaml", "reading": "sideways"}})
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, str(path), "self_training.coverage.reading", "'best', 'shifted' or 'unshifted'")
    assert not (tmp_path / "plain").exists()  # nothing trained


def test_a_reading_with_only_a_layer_is_a_one_line_error(corpus, tmp_path, capsys):
    path, _ = _write_set(tmp_path, corpus, readings={"half": {"system": "plain", "layer": 0}})
    code, _, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, "reading 'half' gives only one of layer/head")


def test_a_second_run_on_a_locked_work_dir_is_a_one_line_error_before_any_work(corpus, tmp_path, capsys):
    """align-experiment holds each system's work_dir lock, as every other writing command: while
    another process holds it, the run stops with the lock's one-line error before it aligns
    (eflomal wrote the system's data.train_align first) or trains anything."""
    import fcntl

    path, results = _write_set(tmp_path, corpus)
    tree = yaml.safe_load((tmp_path / "plain.yaml").read_text())
    tree["data"]["train_align"] = str(tmp_path / "plain.align")  # missing: the run would align the corpus with eflomal first
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(tree))
    work = tmp_path / "plain"
    work.mkdir()
    with open(work / ".syntaxnmt-lock", "w", encoding="utf-8") as other:  # another process's lock: its own open file
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("syntaxnmt pid 4242 on host elsewhere\n")
        other.flush()
        code, out, err = run_cli(capsys, "align-experiment", path)
    assert_one_line_error(code, err, f"{work}: the work_dir is in use by syntaxnmt pid 4242 on host elsewhere")
    assert not (tmp_path / "plain.align").exists() and sorted(p.name for p in work.iterdir()) == [".syntaxnmt-lock"] and not results.exists()




def _made_up_rows(seeds: list[int]) -> tuple[list[dict], dict]:
    """Two systems' runs, made up (no training): per seed, the sentence statistics of BLEU and of
    AER against a diagonal gold alignment. The first system's seeds 1-2 are close to the gold and
    the references, 3-4 far from both (when there are four)."""
    from syntaxnmt.data.links import aer_statistics
    from syntaxnmt.metrics import bleu_statistics

    sure = [{(i, i) for i in range(len(r.split()))} for r in REFS]
    possible = [set() for _ in REFS]
    wrong = {1: {0}, 2: {0, 1}, 3: set(range(8)) - {5}, 4: set(range(8)) - {5, 6}}
    seen = {"a": {}, "b": {}}
    rows = []
    for label in ("a", "b"):
        runs = []
        for seed in seeds:
            bad = wrong[seed] if label == "a" else {(seed + k) % 8 for k in range(3)}
            hyps = [" ".join(r.split()[:-1]) if i in bad else r for i, r in enumerate(REFS)]
            links = [{(i, (i + 1) % len(s)) for i, _ in enumerate(s)} if k in bad else set(s) for k, s in enumerate(sure)]
            stats = aer_statistics(sure, possible, links)
            error = 100 * aer(sure, possible, links).aer
            seen[label][seed] = {"hyps": hyps, "aer": error}
            runs.append({"steps": 10, "seconds": 1.0, "bleu": bleu_statistics(hyps, [REFS]), "aer": {"aer": error, "precision": 50.0, "recall": 50.0, "stats": stats}, "avg_aer": error})
        rows.append({"label": label, "where": "all layers+heads", "runs": runs})
    return rows, seen


def test_an_alignment_table_over_seeds_states_its_power_and_the_aa_checks(tmp_path):
    """Issue 50: with seeds, the power lines (BLEU and AER, from the first system's s_opt) and the
    A/A checks on the first system's seeds follow the alignment table; the AER figures are those of
    the corpus AER of each seed (``links.aer``), the Welch counts scipy's. One seed: no such lines."""
    import scipy.stats

    from syntaxnmt.experiments.alignment import AlignmentSet, alignment_table
    from syntaxnmt.metrics import aa_splits, minimum_detectable_difference

    def spec(seeds):
        return AlignmentSet.model_validate({"name": "made-up", "configs": {"a": "a.yaml", "b": "b.yaml"}, "test": {"src": "t.src", "ref": "t.ref", "align": "t.align"}, "seeds": seeds, "bootstrap": 100, "shuffles": 200})

    rows, seen = _made_up_rows([1, 2, 3, 4])
    text = alignment_table(spec([1, 2, 3, 4]), rows, [], len(REFS), "made up", "align.set.yaml")
    bleus = [score(seen["a"][s]["hyps"], [REFS], force=True).bleu for s in (1, 2, 3, 4)]
    errors = [seen["a"][s]["aer"] for s in (1, 2, 3, 4)]
    assert re.search(r"\| a \| all layers\+heads \| 10 ± 0 \| 1 s \| ", text) and text.index("| b |") < text.index("Power (BLEU)")
    for measure, values in (("BLEU", bleus), ("AER", errors)):
        sd = statistics.stdev(values)
        assert f"Power ({measure}): with 4 seeds of a and 4 seeds per other system, the smallest true difference of mean {measure}" in text
        assert f"test {minimum_detectable_difference(sd, 4, 4):.2f} {measure} (s_opt {sd:.2f})" in text
        welch = sum(scipy.stats.ttest_ind([values[i] for i in x], [values[i] for i in y], equal_var=False).pvalue < 0.05 for x, y in aa_splits(4))
        assert welch == 1  # the split {1, 2} / {3, 4}
        assert f"A/A check ({measure}, calibration): the 4 seeds of a split every way into two groups of 2 and 2 (3 splits; approximate randomization with 200 shuffles)" in text
        assert re.search(rf"A/A check \({measure}, calibration\): [^\n]*test: Welch over seeds 1/3 \(33 %\), 95 % CI excluding 0 \d/3", text)
    # Three seeds: the power lines; the A/A checks say why there are none.
    rows, seen = _made_up_rows([1, 2, 3])
    three = alignment_table(spec([1, 2, 3]), rows, [], len(REFS), "made up", "align.set.yaml")
    assert "Power (AER): with 3 seeds of a and 3 seeds per other system" in three and "A/A check (AER, calibration): not possible with 3 seeds of a" in three
    # One run per system: no such lines.
    rows, _ = _made_up_rows([1])
    one = alignment_table(spec([]), rows, [], len(REFS), "made up", "align.set.yaml")
    assert "| b |" in one and "Power" not in one and "A/A check" not in one
