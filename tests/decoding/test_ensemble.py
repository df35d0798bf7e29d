"""Tests for syntaxnmt.decoding.ensemble: models decoding together by averaging their log-probabilities."""

from __future__ import annotations

import pytest
import torch
from conftest import untrained_checkpoint

from syntaxnmt.cli import main
from syntaxnmt.decoding.ensemble import Ensemble, load_ensemble
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.decoding.search import search
from syntaxnmt.errors import UserError

DEVICE = torch.device("cpu")
RNN = {"model": {"arch": "rnn", "heads": 1, "dropout": 0.0, "rnn": {"hidden": 24, "attention_dim": 16}}}
LINES = ["the cat sees a dog", "a small dog runs", "the big red bird sleeps near the house"]


def _same_hyps(a, b, exact: bool) -> None:
    for ha, hb in zip(a, b):
        assert [h.tokens for h in ha] == [h.tokens for h in hb]
        for x, y in zip(ha, hb):
            assert x.score == (y.score if exact else pytest.approx(y.score, abs=1e-4))


def _sources(cfg, toks):
    import numpy as np

    return [np.asarray(toks.src.encode(line), dtype=np.int64) for line in LINES]


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_an_ensemble_of_one_model_equals_the_model(make_config, tmp_path, arch):
    cfg = make_config(RNN if arch == "rnn" else None)
    path = untrained_checkpoint(cfg, tmp_path / "a.pt", seed=4)
    model, _, toks = load_model(path, DEVICE)
    one = Ensemble([model]).eval()
    decode = cfg.decode.model_copy(update={"coverage_penalty": 0.3})
    for beam in (1, 3):
        alone = translate_lines(model, cfg, toks, LINES, decode, DEVICE, beam=beam, nbest=beam)
        together = translate_lines(one, cfg, toks, LINES, decode, DEVICE, beam=beam, nbest=beam)
        assert alone == together


def test_two_copies_of_a_model_decode_like_the_model(make_config, tmp_path):
    cfg = make_config()
    path = untrained_checkpoint(cfg, tmp_path / "a.pt", seed=5)
    model, _, toks = load_model(path, DEVICE)
    twice, _, _ = load_ensemble([path, path], DEVICE)
    from syntaxnmt.data.batches import make_batch

    batch = make_batch(_sources(cfg, toks), None, range(len(LINES)))
    _same_hyps(search(model, batch, 4, 12, nbest=2), search(twice, batch, 4, 12, nbest=2), exact=False)


def test_a_mixed_ensemble_averages_log_probabilities(make_config, tmp_path):
    """A Transformer and an RNN: every step is log_softmax of the mean of the members' log-probabilities."""
    from syntaxnmt.data.batches import make_batch

    t_cfg, r_cfg = make_config(), make_config(RNN)
    t_path, r_path = untrained_checkpoint(t_cfg, tmp_path / "t.pt", 6), untrained_checkpoint(r_cfg, tmp_path / "r.pt", 7)
    ens, cfg, toks = load_ensemble([t_path, r_path], DEVICE)
    members = list(ens.models)
    batch = make_batch(_sources(cfg, toks), None, range(len(LINES)))
    state = ens.init_state(ens.encode(batch))
    singles = [m.init_state(m.encode(batch)) for m in members]
    tokens = torch.full((len(LINES),), 2)
    for _ in range(3):
        lp, state = ens.step(tokens, state, need_weights=True)
        outs = [m.step(tokens, s, need_weights=True) for m, s in zip(members, singles)]
        expected = torch.log_softmax((outs[0][0] + outs[1][0]) / 2, dim=-1)
        assert torch.allclose(lp, expected, atol=1e-5)
        assert torch.allclose(lp.exp().sum(-1), torch.ones(len(LINES)), atol=1e-5)
        assert torch.allclose(state.last_cross_attention, (outs[0][1].last_cross_attention + outs[1][1].last_cross_attention) / 2, atol=1e-6)
        tokens = lp.argmax(-1)
    assert all(len(nb) == 2 for nb in translate_lines(ens, cfg, toks, LINES, cfg.decode, DEVICE, beam=3, nbest=2))


def test_translate_cli_takes_several_checkpoints(make_config, tmp_path, capsys):
    cfg = make_config()
    a, b = untrained_checkpoint(cfg, tmp_path / "a.pt", 1), untrained_checkpoint(cfg, tmp_path / "b.pt", 2)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n")
    main(["translate", "--checkpoint", str(a), str(b), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--device", "cpu"])
    ens, _, toks = load_ensemble([a, b], DEVICE)
    expected = [nb[0][0] for nb in translate_lines(ens, cfg, toks, LINES, cfg.decode, DEVICE)]
    assert (tmp_path / "out.txt").read_text().splitlines() == expected


def test_members_with_other_vocabularies_are_refused(make_config, corpus, tmp_path, capsys):
    from syntaxnmt.data.prepare import prepare

    cfg = make_config()
    other = make_config({"data": {"vocab_size": 150}}, prepared_dir=tmp_path / "prep150")
    prepare(other, log=lambda *a, **k: None)
    a, b = untrained_checkpoint(cfg, tmp_path / "a.pt", 1), untrained_checkpoint(other, tmp_path / "b.pt", 2)
    with pytest.raises(UserError, match="vocabulary differs"):
        load_ensemble([a, b], DEVICE)
    with pytest.raises(SystemExit) as e:
        main(["translate", "--checkpoint", str(a), str(b), "-i", "-", "--device", "cpu"])
    assert e.value.code == 2 and "vocabulary differs" in capsys.readouterr().err
