"""Tests for syntaxnmt.decoding.translate: searching subword ids in batches, side by side in threads or forked processes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.translate import translate_ids

CPU = torch.device("cpu")


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
