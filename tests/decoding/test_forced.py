"""Tests for syntaxnmt.decoding.forced: scoring given targets (force-decoding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import untrained_checkpoint

from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.ensemble import load_ensemble
from syntaxnmt.decoding.forced import normalized_score, score_ids
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.translate import translate_ids

LINES = ["A man's dog, sleeping.", "Two kids play soccer."]
CPU = torch.device("cpu")


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
