"""The OSIS cleaning and chapter filtering of recipes/bible-en-es/prepare.py, on hand-made snippets
modelled on the WEB and Reina-Valera SWORD modules (the recipe itself, which needs apt, is not run)."""

from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
bible = load_script(ROOT / "recipes" / "bible-en-es" / "prepare.py", "bible_prepare")


def test_strongs_tags_and_footnotes_leave_plain_text_with_word_boundaries():
    raw = (
        '<div type="x-milestone" subType="x-preverse" sID="pv1"/><w lemma="strong:H7225">In</w> '
        '<w lemma="strong:H7225">the beginning</w>, <w lemma="strong:H0430">God</w><note placement="foot">'
        '<reference type="annotateRef">1:1 </reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים”.</note>'
        '<w lemma="strong:H1254">created</w> the <w lemma="strong:H0776">earth</w><note type="crossReference">'
        "<reference>Exodus 30:12</reference></note>. <div eID=\"gen25\" type=\"x-p\"/>"
    )
    assert bible.clean_osis(raw) == "In the beginning, God created the earth."


def test_quotes_lines_headings_and_speakers():
    raw = (
        '<speaker>Beloved</speaker> <lg sID="g1"/> <l level="1" sID="g2"/>Let him kiss me;<l eID="g2" level="1"/>'
        '<title type="section">A heading</title><l level="2" sID="g3"/>for your love is better &amp; sweeter.'
        '<l eID="g3" level="2"/> said, <q who="Jesus">“Allow it now.”</q>Then he allowed him<q who="x">”</q>, '
        '<transChange type="added">and</transChange> left.'
    )
    assert bible.clean_osis(raw) == "Let him kiss me; for your love is better & sweeter. said, “Allow it now.” Then he allowed him”, and left."


def test_canonical_psalm_title_kept_and_glossary_after_the_last_verse_cut():
    psalm = '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="g1"/>Yahweh, how many!'
    assert bible.clean_osis(psalm) == "A Psalm by David. Yahweh, how many!"
    last = (
        'Be with all the saints. Amen.  <chapter eID="Rev.22"/> <div canonical="true" eID="g2" osisID="Rev" type="book"/> '
        '<div sID="g3" type="glossary"/> <title level="1" type="main">Glossary</title> Abaddon is Hebrew for destruction.'
    )
    assert bible.clean_osis(last) == "Be with all the saints. Amen."


def test_drop_capital_of_a_chapter_start_only():
    raw = '<w lemma="strong:H7225">EN el principio</w> crió Dios los cielos. JEHOVÁ'
    assert bible.clean_osis(raw, chapter_start=True) == "En el principio crió Dios los cielos. JEHOVÁ"
    assert bible.clean_osis(raw) == "EN el principio crió Dios los cielos. JEHOVÁ"
    assert bible.clean_osis("¡OH Jehová, cuánto!", chapter_start=True) == "¡Oh Jehová, cuánto!"


def test_chapters_align_by_reference_and_shifted_chapters_are_dropped():
    verses = {
        "en": {("Gen", 1, 1): "In the beginning.", ("Gen", 1, 2): "", ("Gen", 2, 1): "One two three four five six seven eight nine ten eleven."},
        "es": {("Gen", 1, 1): "En el principio.", ("Gen", 1, 2): "Y la tierra.", ("Gen", 2, 1): "Uno dos.", ("Gen", 2, 2): "Tres."},
    }
    chapters = bible.chapters_in_order(verses)
    assert chapters == [("Gen", 1, [("In the beginning.", "En el principio.")]), ("Gen", 2, [(verses["en"][("Gen", 2, 1)], "Uno dos.")])]
    assert bible.aligned(chapters[0][2]) and not bible.aligned(chapters[1][2])
    assert [bible.split_of(i) for i in (0, 10, 30, 40, 41)] == ["dev", "test", "test", "dev", "train"]


def test_heldout_chapters_are_never_test_or_dev_and_leave_train():
    splits = [bible.split_of(i, 5) for i in range(1189)]
    assert splits.count("heldout") == 238 and splits.count("test") == 59 and splits.count("dev") == 30
    assert [bible.split_of(i) for i in range(1189)].count("heldout") == 0
    for i in range(1189):
        if bible.split_of(i) in ("test", "dev"):
            assert bible.split_of(i, 5) == bible.split_of(i)


contrastive = load_script(ROOT / "recipes" / "bible-en-es" / "contrastive.py", "bible_contrastive")


def write_corpus(folder: Path, heldout: bool) -> None:
    """A two-chapter corpus in prepare.py's layout and the links contrastive.py would have computed."""
    from syntaxnmt.data.pronouns import tokenize

    chapter = [("The city was great .", "La ciudad era grande ."), ("He burned it .", "Él la quemó .")]
    other = [("The men came .", "Los hombres vinieron ."), ("They went .", "Ellos fueron .")]
    layout = {"train": [("Gen.1", other)], "dev": [("Gen.2", other)], "test": [("Gen.3", chapter)]}
    if heldout:
        layout["heldout"] = [("Gen.4", other)]
    else:
        layout["train"].append(("Gen.4", other))
    folder.mkdir(parents=True)
    links = []
    for split, docs in layout.items():
        rows = [(doc, en, es) for doc, pairs in docs for en, es in pairs]
        for ext, col in (("docs", 0), ("en", 1), ("es", 2)):
            (folder / f"{split}.{ext}").write_text("".join(r[col] + "\n" for r in rows), encoding="utf-8")
        for _, en, es in rows:
            n = len(tokenize(en))
            pairs = [(k, k) for k in range(n)] if en != "He burned it ." else [(0, 0), (1, 2), (2, 1), (3, 3)]
            links.append(" ".join(f"{s}-{t}" for s, t in pairs))
    if not heldout:
        (folder / "eflomal.links").write_text("".join(x + "\n" for x in links), encoding="utf-8")


def test_contrastive_set_from_test_and_heldout_chapters(tmp_path, capsys):
    write_corpus(tmp_path / "data", heldout=False)
    write_corpus(tmp_path / "data-heldout", heldout=True)
    contrastive.main([str(tmp_path / "data-heldout"), "--links-from", str(tmp_path / "data")])
    out = capsys.readouterr().out
    assert "2 items written" in out and "| it:lo/la | 1 |" in out and "| they:ellos/ellas | 1 |" in out
    from syntaxnmt.data.contrastive import read_contrastive

    items = read_contrastive(tmp_path / "data-heldout" / "contrastive.json")
    assert [(i.doc, i.line, i.distance, i.correct) for i in items] == [("Gen.3", 1, 1, 1), ("Gen.4", 1, 1, 0)]
    assert items[0].candidates == ("Él lo quemó .", "Él la quemó .") and items[0].context_tgt == ("La ciudad era grande .",)
    tsv = (tmp_path / "data-heldout" / "contrastive.tsv").read_text(encoding="utf-8").splitlines()
    assert tsv[1].split("\t")[:4] == ["test", "Gen.3", "1", "1"]


def test_contrastive_set_from_a_kept_copy_of_the_links_is_the_same_set(tmp_path, capsys):
    """--links FILE (gzipped, as committed under results/bible-en-es/) re-derives the set without
    eflomal, byte for byte; a copy for other verse pairs is one error line."""
    import gzip

    write_corpus(tmp_path / "data", heldout=False)
    heldout = tmp_path / "data-heldout"
    write_corpus(heldout, heldout=True)
    contrastive.main([str(heldout), "--links-from", str(tmp_path / "data")])
    first = (heldout / "contrastive.json").read_bytes()
    kept = tmp_path / "links.gz"
    kept.write_bytes(gzip.compress((heldout / "eflomal.links").read_bytes()))
    for f in ("eflomal.links", "contrastive.json", "contrastive.tsv"):
        (heldout / f).unlink()
    capsys.readouterr()
    contrastive.main([str(heldout), "--links", str(kept)])
    assert "links of 8 verse pairs copied from" in capsys.readouterr().out and (heldout / "contrastive.json").read_bytes() == first
    kept.write_bytes(gzip.compress(b"0-0\n"))
    for argv in ([str(heldout), "--links", str(kept)], [str(heldout), "--links", str(kept), "--realign"]):
        with pytest.raises(SystemExit) as e:
            contrastive.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("syntaxnmt: error: --links") and len(err.splitlines()) == 1


def test_the_reading_sample_keeps_its_items_when_others_leave_the_set():
    from types import SimpleNamespace

    mined = [("test", SimpleNamespace(doc=f"Gen.{k}", position=k % 7)) for k in range(200)]
    chosen = contrastive.sample(mined, 30, 53)
    assert len(chosen) == 30 and chosen == sorted(chosen) and contrastive.sample(mined, 30, 53) == chosen
    assert contrastive.sample(mined, 30, 54) != chosen
    gone = {chosen[0], *[k for k in range(200) if k not in chosen][:3]}  # one sampled item and three others leave
    rest = [m for k, m in enumerate(mined) if k not in gone]
    kept = {rest[k][1].doc for k in contrastive.sample(rest, 30, 53)}
    assert {mined[k][1].doc for k in chosen[1:]} <= kept and len(kept) == 30


def test_contrastive_without_data_is_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        contrastive.main([str(tmp_path / "missing")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("syntaxnmt: error: ") and "prepare.sh" in err and len(err.splitlines()) == 1


study_table = load_script(ROOT / "recipes" / "bible-en-es" / "study_table.py", "bible_study_table")


def write_contrastive(path, accuracy, items=1000, draws=1):
    """A made-up `syntaxnmt score -o` file: ``accuracy`` of ``items`` items, half of them with the
    antecedent one verse back (*it*), half two verses back (*them*), each half at that accuracy."""
    import json

    half = items // 2
    right = round(accuracy * half)
    outcomes = [draws] * right + [0] * (half - right)
    cells = {"it:él/ella / distance 1": {"accuracy": right / half, "items": half, "chance": 0.5},
             "them:los/las / distance 2": {"accuracy": right / half, "items": half, "chance": 0.5}}
    path.write_text(json.dumps({"accuracy": 2 * right / items, "items": items, "draws": draws, "outcomes": outcomes + outcomes, "cells": cells}), encoding="utf-8")


def made_up_study(tmp_path, seeds, accuracy, refs, items=1000):
    """study.sh's work folder with made-up outputs and contrastive results: ``accuracy(system, seed,
    context)``; the items' table (contrastive.tsv) as :func:`write_contrastive` lays them out: the
    first half masculine *it* one verse back, the second feminine *them* two verses back."""
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "test.es").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    rows = ["split\tdoc\tline\tdistance\tphenomenon\ten_word\tes_word\tgender\tantecedent\tantecedent_verse"]
    rows += [f"test\tGen.{k}\t{k}\t1\tit:él/ella\tit\tél\tm\tel pan (bread)\t1" for k in range(items // 2)]
    rows += [f"heldout\tEx.{k}\t{k}\t2\tthem:los/las\tthem\tlas\tf\tlas ovejas (sheep)\t1" for k in range(items // 2)]
    (tmp_path / "data" / "contrastive.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    for seed in seeds:
        for k, m in enumerate(study_table.SYSTEMS):
            folder = tmp_path / "work" / f"seed-{seed}" / m
            folder.mkdir(parents=True)
            hyps = [r if (i + k + seed) % 3 else "y el hombre vió" for i, r in enumerate(refs)]
            (folder / "test.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
            for c in ("true", "other-document", "none") if m in study_table.CONTEXT_MODELS else ("none",):
                write_contrastive(folder / f"contrastive-{c}.json", accuracy(m, seed, c))


def table_rows(out):
    """The main table's rows by system (the first table: the one by distance repeats the names)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and "---" not in line:
            rows.setdefault(line.split(" | ")[0].lstrip("| "), line.split(" | "))
    return rows


def test_study_table_over_seeds(tmp_path):
    """Two seeds of made-up outputs: every system gets a row with BLEU, chrF and the accuracies,
    the control's row has no difference, a context model's has one against the control's floor
    with its two-level interval; the accuracy by distance and pronoun under it."""
    refs = [f"y el hombre {k} vió la ciudad grande de la tierra" for k in range(40)]
    base = {"sentence": 0.60, "sentence-more": 0.62, "concat": 0.64, "han": 0.70}
    made_up_study(tmp_path, (1, 2), lambda m, seed, c: base[m] + 0.01 * seed if c == "true" or m not in study_table.CONTEXT_MODELS else 0.61 + 0.01 * seed, refs)
    out = study_table.table(tmp_path / "work", tmp_path / "data", bootstrap=50)
    rows = table_rows(out)
    assert "Seeds 1, 2 (2)" in out
    han = rows["HAN (k = 3, source side, + M)"]
    assert han[5] == "71.5 ± 0.7" and han[6] == "62.5 ± 0.7" and han[7] == "62.5 ± 0.7"
    low, high = (float(x) for x in han[8].split("[")[1].split("]")[0].split(", "))
    assert han[8].startswith("+8.0 [") and 0 < low < 8.0 < high and "; p " in han[8]
    control = rows["**sentence-more** (control, + M)"]
    assert control[2] == "–" and control[5] == "(floor) 63.5 ± 0.7" and control[8] == "– |"
    assert rows["sentence (N updates)"][2].startswith(("+", "-")) and "[" in rows["sentence (N updates)"][2]
    # Under the table (issue 50): what two seeds can detect, from the control's s_opt; no A/A check with two seeds.
    import statistics

    from syntaxnmt.metrics import minimum_detectable_difference, score

    control = [score([r if (i + 1 + seed) % 3 else "y el hombre vió" for i, r in enumerate(refs)], [refs], force=True).bleu for seed in (1, 2)]
    sd = statistics.stdev(control)
    assert "Power (BLEU): with 2 seeds of sentence-more (control, + M) and 2 seeds per other system" in out
    assert f"test {minimum_detectable_difference(sd, 2, 2):.2f} BLEU (s_opt {sd:.2f})" in out
    assert "A/A check (BLEU, calibration): not possible with 2 seeds of sentence-more (control, + M)" in out
    # By distance, pronoun and gender: the headers count the items, HAN reads its context, the control none.
    assert "| system | context | distance 1 (500) | distance 2 (500) | *it* (500) | *them* (500) | feminine (500) | masculine (500) |" in out
    assert "| HAN (k = 3, source side, + M) | true | 71.5 ± 0.7 | 71.5 ± 0.7 | 71.5 ± 0.7 | 71.5 ± 0.7 | 71.5 ± 0.7 | 71.5 ± 0.7 |" in out
    assert "| HAN (k = 3, source side, + M) | none | 62.5 ± 0.7 | 62.5 ± 0.7 |" in out
    assert "| **sentence-more** (control, + M) | none | 63.5 ± 0.7 |" in out


def test_study_table_collects_and_rescores_byte_for_byte(tmp_path, capsys):
    """--collect writes one scores file per run (the same bytes when written again); --rescore
    gives the same table from them alone, with no work folder and no references, the training
    table (read from each run's last.pt) included."""
    from syntaxnmt.checkpoint import save_checkpoint

    refs = [f"la tierra {k} era buena" for k in range(12)]
    made_up_study(tmp_path, (1, 2), lambda m, seed, c: 0.5 + 0.05 * seed + (0.1 if m == "han" and c == "true" else 0.0), refs)
    for seed in (1, 2):
        for m in study_table.SYSTEMS:
            steps = 2000 if m == "sentence" else 600
            progress = {"step": steps, "train_seconds": 1.2 * steps + 60 * seed, "train_tokens": 3000 * steps, "best": 20.0 + seed}
            save_checkpoint(tmp_path / "work" / f"seed-{seed}" / m / "last.pt", {"progress": progress})
    results = tmp_path / "results"
    study_table.main([str(tmp_path / "work"), "--data", str(tmp_path / "data"), "--collect", str(results), "--bootstrap", "30"])
    first = capsys.readouterr().out
    assert "| sentence (N updates) | 2,000 | 21.50 ± 0.71 | 41.5 ± 0.7 | 2410 ± 41 |" in first  # 2,460 and 2,520 s
    assert "| HAN (k = 3, source side, + M) | 600 | 21.50 ± 0.71 | 13.5 ± 0.7 | 2225 ± 117 |" in first  # 780 and 840 s
    files = sorted(p.name for p in results.iterdir())
    assert files == sorted([f"{m}-seed{s}.json.gz" for m in study_table.SYSTEMS for s in (1, 2)] + ["items.tsv"])
    assert "el pan" not in (results / "items.tsv").read_text(encoding="utf-8")  # metadata only, no text of the data
    before = {p: p.read_bytes() for p in results.iterdir()}
    study_table.main([str(tmp_path / "work"), "--data", str(tmp_path / "data"), "--collect", str(results), "--bootstrap", "30"])
    capsys.readouterr()
    assert {p: p.read_bytes() for p in results.iterdir()} == before
    import shutil

    shutil.rmtree(tmp_path / "work")
    shutil.rmtree(tmp_path / "data")
    study_table.main(["--rescore", str(results), "--bootstrap", "30"])
    assert capsys.readouterr().out == first
    # Neither or both of WORK and --rescore; an empty results folder: one error line each.
    for argv, named in ((["--bootstrap", "5"], "--rescore"), (["--rescore", str(tmp_path / "nothing")], "nothing")):
        with pytest.raises(SystemExit) as e:
            study_table.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("syntaxnmt: error: ") and named in err and len(err.splitlines()) == 1


def test_study_table_names_a_contrastive_file_without_outcomes(tmp_path, capsys):
    """A `score -o` file written before per-item outcomes is named in one error line, not averaged."""
    import json

    refs = ["el cielo", "la tierra"]
    made_up_study(tmp_path, (1,), lambda m, seed, c: 0.5, refs)
    old = tmp_path / "work" / "seed-1" / "han" / "contrastive-true.json"
    old.write_text(json.dumps({"accuracy": 0.5}), encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        study_table.main([str(tmp_path / "work"), "--data", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(old) in err and "outcomes" in err and len(err.splitlines()) == 1


def test_study_table_states_the_accuracy_power_from_the_controls_floor(tmp_path):
    """Three seeds whose accuracies spread differently per system: the accuracy power line takes the
    s_opt of the control's floor (60, 62, 67), not of another system's or context's accuracies."""
    import statistics

    from syntaxnmt.metrics import minimum_detectable_difference

    refs = [f"y el hombre {k} vió la ciudad grande de la tierra" for k in range(20)]
    floor = {1: 60.0, 2: 62.0, 3: 67.0}

    def accuracy(m, seed, c):
        own = {"sentence-more": floor[seed], "sentence": 60 + 0.5 * seed}.get(m, 70 + 0.2 * seed)  # a context model's: with its context
        return (50 + 10 * seed if m in study_table.CONTEXT_MODELS and c == "none" else own) / 100

    made_up_study(tmp_path, (1, 2, 3), accuracy, refs)
    out = study_table.table(tmp_path / "work", tmp_path / "data", bootstrap=20)
    power = next(line for line in out.splitlines() if line.startswith("Power (accuracy %)"))
    sd = statistics.stdev(floor.values())
    assert power.startswith("Power (accuracy %): with 3 seeds of sentence-more's floor (no context) and 3 seeds per other system, ")
    assert f"contrastive set {minimum_detectable_difference(sd, 3, 3):.1f} accuracy % (s_opt {sd:.1f})" in power
    assert out.index("Power (BLEU)") < out.index("A/A check (BLEU") < out.index("Power (accuracy %)") < out.index("A/A check (accuracy %")
    # One seed: no accuracy power line (nor the BLEU lines).
    import shutil

    for seed in (2, 3):
        shutil.rmtree(tmp_path / "work" / f"seed-{seed}")
    one = study_table.table(tmp_path / "work", tmp_path / "data", bootstrap=20)
    assert "Seeds 1 (1)" in one and "Power (" not in one and "A/A" not in one


def test_study_table_without_runs_is_one_error_line(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.es").write_text("x\n", encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        study_table.main([str(tmp_path / "work"), "--data", str(tmp_path / "data")])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("syntaxnmt: error: ")


def test_study_sh_options():
    import subprocess

    script = ROOT / "recipes" / "bible-en-es" / "study.sh"
    bad = subprocess.run(["bash", str(script), "--seeds", "1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --seeds" in bad.stderr
    shown = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "--seed S" in shown.stdout


STUB = r"""#!/usr/bin/env bash
# A stand-in for the syntaxnmt command: records its arguments and writes what study.sh reads.
echo "$*" >> "$STUB_LOG"
cmd="$1"; shift
out=""; prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  case "$a" in --work_dir=*) mkdir -p "${a#--work_dir=}"; touch "${a#--work_dir=}/best.pt" ;; esac
  prev="$a"
done
case "$cmd" in
  translate) cp "$STUB_HYP" "$out" ;;
  score) echo '{"accuracy": 0.75, "items": 4, "draws": 1, "outcomes": [1, 1, 1, 0], "cells": {"it:lo/la / distance 1": {"accuracy": 0.75, "items": 4, "chance": 0.5}}}' > "$out" ;;
esac
"""


def test_study_sh_trains_translates_and_scores_every_system_of_every_seed_once(tmp_path):
    """study.sh with a stand-in `syntaxnmt` (no training): the commands it gives per seed, the
    held-out data and seed in every training, the controls for the context models only, the
    table at the end, and nothing done twice on a re-run."""
    import os
    import subprocess

    data = tmp_path / "runs" / "bible-en-es" / "data-heldout"
    data.mkdir(parents=True)
    refs = [f"y vió la ciudad {k}" for k in range(6)]
    for name in ("heldout.en", "test.en", "test.docs", "contrastive.json"):
        (data / name).write_text("x\n", encoding="utf-8")
    (data / "test.es").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    (tmp_path / "runs" / "bible-en-es" / "prepared-heldout-bpe8k").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "syntaxnmt").write_text(STUB, encoding="utf-8")
    (bin_dir / "syntaxnmt").chmod(0o755)
    log = tmp_path / "calls.log"
    env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log), "STUB_HYP": str(data / "test.es"),
                        "PYTHONPATH": str(ROOT)}
    cmd = ["bash", str(ROOT / "recipes" / "bible-en-es" / "study.sh"), "--seed", "4", "--seed", "5", "--work", "W", "30", "10"]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    calls = log.read_text(encoding="utf-8").splitlines()
    trains = [c for c in calls if c.startswith("train ")]
    assert len(trains) == 10 and all("--data.train_src=runs/bible-en-es/data-heldout/train.en" in c and "--data.prepared_dir=runs/bible-en-es/prepared-heldout-bpe8k" in c for c in trains)
    assert all(" --resume " in c for c in trains)  # a training stopped with the session continues from its last.pt
    assert [c.split("--work_dir=")[1].split()[0] for c in trains[:4]] == ["W/seed-4/sentence", "W/seed-4/sentence-more", "W/seed-4/concat", "W/seed-4/han"]
    assert all("--seed=4" in c for c in trains[:4]) and all("--seed=5" in c for c in trains[4:8])
    # then HAN on both sides, seed by seed, once both seeds have the four
    assert [c.split("--work_dir=")[1].split()[0] for c in trains[8:]] == ["W/seed-4/han-both", "W/seed-5/han-both"]
    assert all("--model.context.side=both" in c and "/han.yaml " in c and "--seed=4" in trains[8] for c in trains[8:])
    assert "--train.init_from=W/seed-5/sentence/best.pt" in trains[9] and all("--model.context" not in c for c in trains[:8])
    assert "--train.max_steps=30" in trains[0] and all("--train.max_steps=10" in c and "--train.init_from=W/seed-4/sentence/best.pt" in c for c in trains[1:4])
    scores = [c for c in calls if c.startswith("score ")]
    contexts = [(c.split("--checkpoint ")[1].split("/best.pt")[0], c.split("--context ")[1].split()[0]) for c in scores if "seed-4" in c and "han-both" not in c]
    assert contexts == [("W/seed-4/sentence", "none"), ("W/seed-4/sentence-more", "none"),
                        ("W/seed-4/concat", "true"), ("W/seed-4/concat", "other-document"), ("W/seed-4/concat", "none"),
                        ("W/seed-4/han", "true"), ("W/seed-4/han", "other-document"), ("W/seed-4/han", "none")]
    assert all("--draws 5" in c for c in scores if "other-document" in c)
    assert sum(c.startswith("translate ") for c in calls) == 10
    assert [c.split("--context ")[1].split()[0] for c in scores if "W/seed-5/han-both/" in c] == ["true", "other-document", "none"]
    table = (tmp_path / "W" / "table.md").read_text(encoding="utf-8")
    assert "Seeds 4, 5 (2)" in table and "| HAN (k = 3, source side, + M) | 100.00" in table
    log.write_text("", encoding="utf-8")
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and log.read_text(encoding="utf-8") == ""  # everything done is skipped


def test_accuracy_by_gender_reads_each_items_outcome(tmp_path):
    """A model that always prefers the masculine: 100 % on the masculine items, 0 on the feminine,
    whatever its overall accuracy; a result scored on another set (other item count) is refused."""
    from syntaxnmt.errors import UserError

    items = [{"split": "test", "doc": "Gen.1", "line": str(k), "distance": str(1 + k % 3), "phenomenon": "they:ellos/ellas", "gender": g}
             for k, g in enumerate("mmmf")]
    masculine = {"outcomes": [1, 1, 1, 0], "draws": 1, "cells": {}}
    runs = {(m, 1): {"contrastive": {study_table.reading_context(m): masculine}} for m in study_table.SYSTEMS}
    lines = study_table.groups_table(runs, [1], items)
    assert lines[3] == "| system | context | distance 1 (2) | distance 2 (1) | distance 3 (1) | *they* (4) | feminine (1) | masculine (3) |"
    assert lines[5] == "| sentence (N updates) | none | 50.0 | 100.0 | 100.0 | 75.0 | 0.0 | 100.0 |"
    assert len(lines) == 5 + 4  # the context models' controls were not scored here: no rows for them
    runs["han", 1]["contrastive"]["true"] = {"outcomes": [1, 1], "draws": 1, "cells": {}}
    with pytest.raises(UserError, match="HAN .*, context true: 2 contrastive outcomes for 4 items"):
        study_table.groups_table(runs, [1], items)


def test_balanced_accuracy_weighs_the_genders_equally():
    """The always-masculine model scores 50 balanced (75 % overall on 3 masculine + 1 feminine);
    a model right on the feminine item and on two of three masculine ones scores (100 + 66.7) / 2;
    the statistics sum like sentence statistics, so the table's difference to the floor has the
    two-level interval, and HAN's +33.3 over the control is its row's delta."""
    items = [{"split": "test", "doc": "Gen.1", "line": str(k), "distance": "1", "phenomenon": "they:ellos/ellas", "gender": g}
             for k, g in enumerate("mmmf")]
    genders = [[3], [0, 1, 2]]
    masculine = {"outcomes": [1, 1, 1, 0], "draws": 1}
    mixed = {"outcomes": [2, 2, 0, 2], "draws": 2}
    assert study_table.balanced_from_statistics(study_table.balanced_statistics(masculine, genders).sum(0)) == pytest.approx(50.0)
    assert study_table.balanced_from_statistics(study_table.balanced_statistics(mixed, genders).sum(0)) == pytest.approx((100 + 200 / 3) / 2)
    runs = {}
    for seed in (1, 2):
        for m in study_table.SYSTEMS:
            result = mixed if m == "han" else masculine
            runs[m, seed] = {"contrastive": {c: result for c in (study_table.CONTEXTS if m in study_table.CONTEXT_MODELS else ("none",))}}
    lines = study_table.balanced_table(runs, [1, 2], items, bootstrap=200)
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and "---" not in line}
    assert rows["**sentence-more** (control, + M)"] == "| **sentence-more** (control, + M) | (floor) 50.0 ± 0.0 | – | 50.0 ± 0.0 | – |"
    assert rows["HAN (k = 3, source side, + M)"].startswith("| HAN (k = 3, source side, + M) | 83.3 ± 0.0 | 83.3 ± 0.0 | 83.3 ± 0.0 | +33.3 [")
    assert study_table.balanced_table(runs, [1, 2], [dict(i, gender="m") for i in items], bootstrap=200) == []  # one gender: no balance to take


def test_context_effect_is_paired_within_each_model():
    """HAN right on every item with its context and on half under either control: +50 points in
    every seed, and an interval that brackets 50 (resampling the items moves the half); concat reads
    nothing (equal readings): +0.0 [+0.0, +0.0] and no p (no spread); the sentence models have no row."""
    items = 40
    right = {"outcomes": [1] * items, "draws": 1}
    half = {"outcomes": [1, 0] * (items // 2), "draws": 1}
    runs = {}
    for seed in (1, 2, 3):
        runs["sentence", seed] = runs["sentence-more", seed] = {"contrastive": {"none": half}}
        runs["concat", seed] = {"contrastive": {c: half for c in study_table.CONTEXTS}}
        runs["han", seed] = {"contrastive": {"true": right, "other-document": half, "none": half}}
    lines = study_table.context_effect_table(runs, [1, 2, 3], bootstrap=300)
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"system", "concat 2-to-1 (previous verse, + M)", "HAN (k = 3, source side, + M)"}
    assert rows["concat 2-to-1 (previous verse, + M)"] == "| concat 2-to-1 (previous verse, + M) | +0.0 [+0.0, +0.0] (seeds: +0.0, +0.0, +0.0) | +0.0 [+0.0, +0.0] (seeds: +0.0, +0.0, +0.0) |"
    cell = rows["HAN (k = 3, source side, + M)"].split(" | ")[1]
    low, high = (float(x) for x in cell.split("[")[1].split("]")[0].split(", "))
    assert cell.startswith("+50.0 [") and cell.endswith("(seeds: +50.0, +50.0, +50.0)") and low < 50 < high


def test_an_item_table_with_a_short_row_is_named(tmp_path):
    from syntaxnmt.errors import UserError

    path = tmp_path / "items.tsv"
    path.write_text("split\tdoc\tline\tdistance\tphenomenon\tgender\ntest\tGen.1\t3\t1\tit:él/ella\tm\ntest\tGen.1\t4\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"items\.tsv, line 3: 3 columns for the header's 6"):
        study_table.read_items(path)
    path.write_text("split\tdoc\n", encoding="utf-8")
    with pytest.raises(UserError, match="needs the columns split, doc, line, distance, phenomenon, gender"):
        study_table.read_items(path)


def test_study_table_adds_han_on_both_sides_where_a_seed_has_it(tmp_path, capsys):
    """han-both, trained after the four for the seeds study.sh reaches: a row over its own seeds
    (here one of two), in every table and in what --collect keeps; a seed without the four is left out."""
    refs = [f"la tierra {k} era buena" for k in range(12)]
    made_up_study(tmp_path, (1, 2), lambda m, seed, c: 0.6 + (0.2 if c == "true" else 0.0), refs)
    extra = tmp_path / "work" / "seed-1" / "han-both"
    extra.mkdir()
    (extra / "test.hyp").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    for c in ("true", "other-document", "none"):
        write_contrastive(extra / f"contrastive-{c}.json", 0.9 if c == "true" else 0.6)
    (tmp_path / "work" / "seed-3" / "han-both").mkdir(parents=True)  # seed 3 has not reached the four: not counted
    (tmp_path / "work" / "seed-3" / "han-both" / "test.hyp").write_text("x\n", encoding="utf-8")
    study_table.main([str(tmp_path / "work"), "--data", str(tmp_path / "data"), "--collect", str(tmp_path / "results"), "--bootstrap", "20"])
    out = capsys.readouterr().out
    rows = table_rows(out)
    both = rows["HAN (k = 3, both sides, + M) (1 seed)"]
    assert both[1] == "100.00" and both[5] == "90.0" and both[8].startswith("+30.0 [")  # against the floor of two seeds
    assert "Seeds 1, 2 (2)" in out and "| HAN (k = 3, both sides, + M) | true | 90.0 |" in out
    assert (tmp_path / "results" / "han-both-seed1.json.gz").is_file() and not (tmp_path / "results" / "han-both-seed3.json.gz").exists()
    study_table.main(["--rescore", str(tmp_path / "results"), "--bootstrap", "20"])
    assert capsys.readouterr().out == out


def test_the_study_table_in_the_docs_is_the_one_the_committed_runs_give(capsys, monkeypatch):
    """docs/documents.md's three-seed Bible table (BLEU, chrF, contrastive accuracy, the power and
    A/A lines, the breakdowns and the training table) is, byte for byte, what ``--rescore`` writes
    from the runs committed under results/bible-en-es/study: no model, no data."""
    monkeypatch.chdir(ROOT)
    study_table.main(["--rescore", "results/bible-en-es/study"])
    table = capsys.readouterr().out.strip()
    assert "| **sentence-more** (control, + M) |" in table
    assert table in (ROOT / "docs" / "documents.md").read_text(encoding="utf-8")
