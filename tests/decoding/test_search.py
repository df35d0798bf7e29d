"""Tests for syntaxnmt.decoding.search: greedy and beam search, length limits, n-best lists, a toy model."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from syntaxnmt.config import ModelConfig, load_config
from syntaxnmt.cpu import install
from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.data.batches import make_batch
from syntaxnmt.decoding.search import Hypothesis, beam_search, greedy_search, length_penalty, max_output_length, max_output_lengths, search, topk_rows
from syntaxnmt.inputs import BOS, EOS, PAD, UNK
from syntaxnmt.model.factory import build_model
from syntaxnmt.model.transformer import Transformer

V = 24


def _model(seed: int) -> Transformer:
    """A random Transformer whose output layer has sharper logits and a bias towards EOS, so that
    hypotheses end at different lengths (an untrained model rarely emits EOS otherwise)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, enc_layers=1, dec_layers=2, dropout=0.0, max_positions=64, tie_embeddings="none")
    model = Transformer(cfg, V, V).eval()
    output = nn.Linear(32, V, bias=True)
    with torch.no_grad():
        output.weight.copy_(model.output.weight * 4.0)
        output.bias.zero_()
        output.bias[EOS] = 2.0
    model.output = output
    return model


def _batch(lengths, seed):
    rng = np.random.default_rng(seed)
    return make_batch([rng.integers(4, V, n) for n in lengths], None, range(len(lengths)))


def _same(a: list[list[Hypothesis]], b: list[list[Hypothesis]]) -> None:
    assert len(a) == len(b)
    for ha, hb in zip(a, b):
        assert len(ha) == len(hb)
        for x, y in zip(ha, hb):
            assert x.tokens == y.tokens
            assert x.score == pytest.approx(y.score, abs=1e-4)
            assert x.log_prob == pytest.approx(y.log_prob, abs=1e-4)


BATCHES = [(5,), (3, 9, 1, 6), (12, 2, 2, 7, 4, 10, 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [1.0, 0.0])
def test_beam_one_equals_greedy(seed, alpha):
    model = _model(seed)
    lengths_seen = set()
    for k, lengths in enumerate(BATCHES):
        batch = _batch(lengths, seed * 10 + k)
        greedy = greedy_search(model, batch, max_len=15, alpha=alpha)
        beam = beam_search(model, batch, beam=1, max_len=15, alpha=alpha)
        _same(greedy, beam)
        lengths_seen.update(len(h[0].tokens) for h in greedy)
    assert len(lengths_seen) > 2  # the test covers hypotheses of several lengths


def test_hypothesis_scores_are_consistent():
    model = _model(3)
    batch = _batch((4, 8, 2), 3)
    for alpha in (0.0, 0.6, 1.0):
        for hyps in beam_search(model, batch, beam=4, max_len=12, alpha=alpha, nbest=4):
            for h in hyps:
                assert h.score == pytest.approx(h.log_prob / (len(h.tokens) + 1) ** alpha, rel=1e-5)
                assert h.log_prob <= 0
                assert all(t not in (PAD, BOS, EOS) for t in h.tokens)


@pytest.mark.parametrize("length", [0, 1, 6])
def test_min_len_equal_max_len_forces_the_length(length):
    model = _model(4)
    batch = _batch((3, 9, 5), 4)
    for hyps in greedy_search(model, batch, max_len=length, min_len=length):
        assert len(hyps[0].tokens) == length
    for hyps in beam_search(model, batch, beam=3, max_len=length, min_len=length, nbest=3 if length else 1):
        assert all(len(h.tokens) == length for h in hyps)


def test_max_len_and_min_len_bound_lengths():
    model = _model(5)
    batch = _batch((3, 9, 5, 2), 5)
    for hyps in beam_search(model, batch, beam=3, max_len=7, min_len=3, nbest=3):
        assert all(3 <= len(h.tokens) <= 7 for h in hyps)
    for hyps in greedy_search(model, batch, max_len=4, min_len=2):
        assert 2 <= len(hyps[0].tokens) <= 4


def test_nbest_sorted_and_distinct():
    model = _model(6)
    batch = _batch((3, 9, 5, 1, 7), 6)
    for alpha in (0.0, 1.0):
        nbest = beam_search(model, batch, beam=5, max_len=12, alpha=alpha, nbest=5)
        best = beam_search(model, batch, beam=5, max_len=12, alpha=alpha, nbest=1)
        for hyps, top in zip(nbest, best):
            assert len(hyps) == 5
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)
            assert all(math.isfinite(s) for s in scores)
            assert len({tuple(h.tokens) for h in hyps}) == 5
            assert hyps[0].tokens == top[0].tokens
    # nbest is capped by the beam size
    assert all(len(h) == 2 for h in beam_search(model, batch, beam=2, max_len=12, nbest=5))


def test_beam_search_is_independent_of_the_batch():
    """Finished sentences leave the batch; the others must not be affected."""
    model = _model(7)
    lengths = (3, 11, 1, 6, 8, 2)
    batch = _batch(lengths, 7)
    together = beam_search(model, batch, beam=4, max_len=14, nbest=2)
    for i in range(len(lengths)):
        alone = beam_search(model, make_batch([batch.src[i][batch.src[i] != PAD][:-1].numpy()], None, [i]), beam=4, max_len=14, nbest=2)
        _same([together[i]], alone)


def test_search_dispatch():
    model = _model(8)
    batch = _batch((4, 6), 8)
    _same(search(model, batch, beam=1, max_len=10), greedy_search(model, batch, max_len=10))
    _same(search(model, batch, beam=3, max_len=10, nbest=2), beam_search(model, batch, beam=3, max_len=10, nbest=2))


def test_max_output_length():
    lens = torch.tensor([3, 10, 4])
    assert max_output_length(lens, 1.5, 10, 1000) == 25
    assert max_output_length(lens, 1.5, 10, 20) == 20
    assert max_output_length(lens, 0.0, 0, 1000) == 1
    assert max_output_lengths(lens, 1.5, 10, 1000).tolist() == [14, 25, 16]
    assert max_output_lengths(lens, 1.5, 10, 20).tolist() == [14, 20, 16]
    assert max_output_lengths(lens, 0.0, 0, 1000).tolist() == [1, 1, 1]


@pytest.mark.parametrize("beam", [1, 3])
def test_per_sentence_max_len_makes_results_independent_of_the_neighbours(beam):
    """With one limit per sentence, a sentence batched with longer ones gets what it gets alone,
    also when it runs into its limit (outputs of exactly its max length)."""
    model = _model(9)
    lengths = (2, 12, 5, 1)
    batch = _batch(lengths, 9)
    limits = torch.tensor([2, 9, 4, 1])
    together = search(model, batch, beam=beam, max_len=limits, nbest=1)
    hit_limit = 0
    for i in range(len(lengths)):
        single = make_batch([batch.src[i][batch.src[i] != PAD][:-1].numpy()], None, [i])
        alone = search(model, single, beam=beam, max_len=int(limits[i]), nbest=1)
        _same([together[i]], alone)
        assert len(together[i][0].tokens) <= limits[i]
        hit_limit += len(together[i][0].tokens) == limits[i]
    assert hit_limit >= 1


# ---------------------------------------------------------------- a toy model with a known answer

A, B = 4, 5  # two "words"; the vocabulary is PAD UNK BOS EOS A B
TRAP, PLAIN = 4, 5  # source first tokens choosing the toy distribution


def _dist(kind: int, history: tuple[int, ...]) -> list[float]:
    """P(next | source kind, generated tokens) over the 6-token vocabulary."""
    p = [0.0] * 6
    if kind == TRAP:
        # Greedy takes A (0.55) then EOS (0.4): P = 0.22. Beam finds B EOS: 0.45 * 0.9 = 0.405.
        if not history:
            p[A], p[B] = 0.55, 0.45
        elif history == (A,):
            p[EOS], p[A], p[B], p[UNK] = 0.4, 0.2, 0.2, 0.2
        elif history == (B,):
            p[EOS], p[A], p[B], p[UNK] = 0.9, 0.04, 0.03, 0.03
        else:
            p[EOS], p[UNK] = 0.99, 0.01
    else:  # greedy is optimal: A B EOS with probability 0.9 each
        step = len(history)
        if step == 0:
            p[A], p[B], p[UNK], p[EOS] = 0.9, 0.05, 0.03, 0.02
        elif step == 1:
            p[B], p[A], p[UNK], p[EOS] = 0.9, 0.05, 0.03, 0.02
        else:
            p[EOS], p[A], p[B], p[UNK] = 0.9, 0.05, 0.03, 0.02
    return p


@dataclass
class _ToyEncoding:
    kind: torch.Tensor  # (N,)

    def index_select(self, index: torch.Tensor) -> "_ToyEncoding":
        return _ToyEncoding(self.kind.index_select(0, index))


@dataclass
class _ToyState:
    enc: _ToyEncoding
    history: list[tuple[int, ...]]


class ToyModel:
    """Implements the search interface; the distribution depends on the whole history."""

    def encode(self, batch):
        return _ToyEncoding(batch.src[:, 0].clone())

    def init_state(self, enc):
        return _ToyState(enc, [() for _ in range(len(enc.kind))])

    def step(self, tokens, state):
        new_history = []
        for h, tok in zip(state.history, tokens.tolist()):
            new_history.append(h + (tok,) if tok not in (BOS, PAD, EOS) else h)
        state.history = new_history
        probs = torch.tensor([_dist(int(k), h) for k, h in zip(state.enc.kind, state.history)])
        return torch.log(probs), state

    def reorder_state(self, state, index, sources_kept=False):
        return _ToyState(state.enc.index_select(index), [state.history[i] for i in index.tolist()])


def test_beam_search_finds_what_greedy_misses():
    model = ToyModel()
    batch = make_batch([[TRAP, 7], [PLAIN], [TRAP], [PLAIN, 9, 9]], None, range(4))
    greedy = greedy_search(model, batch, max_len=5, alpha=0.0)
    assert [h[0].tokens for h in greedy] == [[A], [A, B], [A], [A, B]]
    assert greedy[0][0].log_prob == pytest.approx(math.log(0.55 * 0.4))

    beam = beam_search(model, batch, beam=2, max_len=5, alpha=0.0, nbest=2)
    assert [h[0].tokens for h in beam] == [[B], [A, B], [B], [A, B]]
    assert beam[0][0].log_prob == pytest.approx(math.log(0.45 * 0.9))
    assert beam[0][0].score == pytest.approx(math.log(0.45 * 0.9))
    assert beam[1][0].log_prob == pytest.approx(math.log(0.9**3))
    assert beam[0][1].tokens == [A] and beam[0][1].log_prob == pytest.approx(math.log(0.55 * 0.4))
    # beam 1 is greedy
    _same(beam_search(model, batch, beam=1, max_len=5, alpha=0.0), greedy)


class _Longer(ToyModel):
    """EOS now (0.5), or A A A A EOS at 0.95 each after 0.45."""

    def step(self, tokens, state):
        log_probs, state = super().step(tokens, state)
        for row, h in enumerate(state.history):
            p = [0.0] * 6
            if not h:
                p[EOS], p[A], p[UNK] = 0.5, 0.45, 0.05
            elif len(h) < 4:
                p[A], p[EOS], p[UNK] = 0.95, 0.03, 0.02
            else:
                p[EOS], p[UNK] = 0.95, 0.05
            log_probs[row] = torch.log(torch.tensor(p))
        return log_probs, state


def test_toy_length_normalization_prefers_longer_hypotheses():
    """With alpha=1 a long, individually likely hypothesis beats a short one of higher total probability."""

    batch = make_batch([[TRAP]], None, [0])
    raw = beam_search(_Longer(), batch, beam=3, max_len=8, alpha=0.0)[0][0]
    normalized = beam_search(_Longer(), batch, beam=3, max_len=8, alpha=1.0)[0][0]
    assert raw.tokens == [] and raw.log_prob == pytest.approx(math.log(0.5))
    assert normalized.tokens == [A, A, A, A]
    assert normalized.log_prob == pytest.approx(math.log(0.45 * 0.95**4))
    assert normalized.score == pytest.approx(math.log(0.45 * 0.95**4) / 5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_gnmt_length_penalty_follows_its_formula(alpha):
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, Eq. 14) beside |Y|^α, on tensors and numbers."""
    lengths = torch.tensor([1.0, 2.0, 7.0, 30.0])
    expected = [((5 + n) / 6) ** alpha for n in (1, 2, 7, 30)]
    assert length_penalty(lengths, alpha, "gnmt").tolist() == pytest.approx(expected)
    assert length_penalty(7, alpha, "gnmt") == pytest.approx(((5 + 7) / 6) ** alpha)
    assert length_penalty(lengths, alpha, "power").tolist() == pytest.approx([n**alpha for n in (1, 2, 7, 30)])
    assert length_penalty(1, alpha, "gnmt") == pytest.approx(1.0)
    with pytest.raises(ValueError):
        length_penalty(lengths, alpha, "linear")


@pytest.mark.parametrize("beam", [1, 3])
def test_search_scores_use_the_gnmt_penalty(beam):
    """Every returned score is log P / ((5 + |y|) / 6)^α, |y| counting EOS."""
    model = _model(3)
    batch = _batch((4, 8, 2), 3)
    for hyps in search(model, batch, beam=beam, max_len=12, alpha=0.8, nbest=beam, lp_type="gnmt"):
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens) + 1) / 6) ** 0.8, abs=1e-4)


def test_toy_gnmt_penalty_is_milder_than_power():
    """GNMT's lp grows slower than |y|^α: at α = 0.5 the toy's long hypothesis (log P = -1.00 over 5
    tokens) wins under |y|^α (-0.45 > log 0.5 = -0.69) but loses under ((5 + 5) / 6)^α (-0.78);
    at α = 1 it wins under GNMT's too (-0.60)."""
    batch = make_batch([[TRAP]], None, [0])
    assert beam_search(_Longer(), batch, beam=3, max_len=8, alpha=0.5, lp_type="power")[0][0].tokens == [A] * 4
    short = beam_search(_Longer(), batch, beam=3, max_len=8, alpha=0.5, lp_type="gnmt")[0][0]
    assert short.tokens == [] and short.score == pytest.approx(math.log(0.5) / (6 / 6) ** 0.5)
    assert beam_search(_Longer(), batch, beam=3, max_len=8, alpha=1.0, lp_type="gnmt")[0][0].tokens == [A] * 4


def _reference_beam(model: Transformer, src: np.ndarray, k: int, max_len: int, alpha: float) -> list[tuple[list[int], float, float]]:
    """Beam search the plain way, for one sentence: every step re-decodes each hypothesis's whole
    prefix (no cache, no reordering, no skipped rows), scores all of its V continuations, and
    keeps the k best of them and of the finished hypotheses (frozen, still competing) by
    log P / |y|^alpha (|y| counting EOS). Returns the k (tokens, score, log P), best first."""
    enc = model.encode(make_batch([src], None, [0]))
    beams: list[tuple[list[int], float, bool]] = [([], 0.0, False)]  # tokens with EOS when finished, log P, finished
    for t in range(max_len + 1):
        cands = []
        for tokens, raw, finished in beams:
            if finished:
                cands.append((tokens, raw, True))
                continue
            states = model.decode(torch.tensor([[BOS, *tokens]]), enc)[0]
            log_probs = torch.log_softmax(model.output(states[0, -1]).float(), dim=-1).tolist()
            for tok, lp in enumerate(log_probs):
                if tok not in (PAD, BOS) and (t < max_len or tok == EOS):
                    cands.append((tokens + [tok], raw + lp, tok == EOS))
        beams = sorted(cands, key=lambda c: c[1] / len(c[0]) ** alpha, reverse=True)[:k]
        if all(finished for _, _, finished in beams):
            break
    return [([x for x in tokens if x != EOS], raw / len(tokens) ** alpha, raw) for tokens, raw, _ in beams]


@pytest.mark.parametrize("seed", [11, 12])
def test_beam_search_equals_re_decoding_without_cache(seed):
    """The fast path (cached keys/values gathered at the next append, finished hypotheses and
    finished sentences out of the step, chunk-wise top-k) finds the hypotheses and scores of a
    plain beam search that re-decodes every prefix: beam 4, 3 sentences of different lengths
    whose hypotheses finish at different steps."""
    model = _model(seed)
    lengths = (2, 9, 5)
    batch = _batch(lengths, seed)
    limits = max_output_lengths(torch.tensor(lengths), 1.0, 3, 64)
    with torch.inference_mode():
        fast = beam_search(model, batch, beam=4, max_len=limits, alpha=1.0, nbest=4)
        reference = [_reference_beam(model, batch.src[i][batch.src[i] != PAD][:-1].numpy(), 4, int(limits[i]), 1.0) for i in range(len(lengths))]
    finished_at = set()
    for hyps, ref in zip(fast, reference):
        assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in ref]
        for h, (_, score, raw) in zip(hyps, ref):
            assert h.score == pytest.approx(score, abs=1e-4) and h.log_prob == pytest.approx(raw, abs=1e-4)
        finished_at.update(len(h.tokens) for h in hyps)
    assert len(finished_at) >= 3  # hypotheses ended at several steps: the skipped-row path ran
    assert len({len(h[0].tokens) for h in fast}) >= 2  # and the sentences at different steps


def test_topk_rows_equals_torch_topk():
    """The chunk-wise top-k returns torch.topk's values and indices on wide rows, with a last
    partial chunk, forbidden (-inf) columns and rows with fewer finite values than k."""
    torch.manual_seed(0)
    x = torch.log_softmax(3 * torch.randn(40, 1000), dim=-1)  # 1000 = 15 chunks of 64 + 40
    x[:, [0, 2, 999]] = float("-inf")
    x[5, :] = float("-inf")
    x[5, 3] = -0.5
    x[7, 990:] = 1.0 + torch.arange(10.0)  # the best values in the partial chunk
    for k in (1, 4, 5):
        values, indices = topk_rows(x, k)
        expected = x.topk(k, dim=-1)
        assert torch.equal(values, expected.values)
        finite = expected.values.isfinite()
        assert torch.equal(indices[finite], expected.indices[finite])
    narrow = torch.randn(3, 50)
    assert torch.equal(topk_rows(narrow, 5)[1], narrow.topk(5, dim=-1).indices)  # too narrow to chunk: torch.topk


@pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")
@pytest.mark.parametrize("seed", [0, 1])
def test_the_cpu_execution_finds_the_plain_models_hypotheses(seed, monkeypatch):
    """A model given the CPU's execution (:func:`syntaxnmt.cpu.install`: its attentions stepped in
    the C kernels, the routed products) and the model as built give the same n-best lists, scores
    and log-probabilities: greedy and beam, with length limits that force EOS (or forbid it),
    per-sentence limits, the coverage penalty (plain attention caches), and an RNN."""
    from syntaxnmt.cpu import attention as cpu_attention

    steps = []
    native_step = cpu_attention.native_step
    monkeypatch.setattr(cpu_attention, "native_step", lambda *a: steps.append(1) or native_step(*a))
    model = _model(seed)
    cfg = load_config(None, ["--model.arch=rnn", "--model.d_model=16", "--model.dropout=0.0"])
    rnn = build_model(cfg.model, V, V).eval()
    for k, lengths in enumerate(BATCHES):
        batch = _batch(lengths, seed * 10 + k)
        limits = max_output_lengths(batch.src.ne(PAD).sum(1), 1.0, 2, 30)
        for m in (model, rnn):
            fast = install(copy.deepcopy(m))
            assert getattr(fast, "native_attention", False) == (m is model)
            for kwargs in ({"beam": 1, "max_len": 15}, {"beam": 4, "max_len": 12, "nbest": 4}, {"beam": 3, "max_len": 5, "min_len": 3, "nbest": 2},
                           {"beam": 3, "max_len": limits, "alpha": 0.0}, {"beam": 2, "max_len": 9, "coverage_penalty": 0.4}, {"beam": 1, "max_len": 4, "min_len": 4}):
                steps.clear()
                _same(search(fast, batch, **kwargs), search(m, batch, **kwargs))
                assert bool(steps) == (m is model and "coverage_penalty" not in kwargs)  # the Transformer's attentions stepped in the C kernels


def test_the_first_step_runs_once_per_sentence():
    """At the first step every beam of a sentence is the same BOS prefix: the model steps on the
    n sentences and its state is expanded to the n * k hypotheses after that step."""
    model, batch = _model(8), _batch((3, 9, 1, 6), 8)
    sizes = []
    step = model.step

    def counting(tokens, state, **kwargs):
        sizes.append((len(tokens), len(kwargs["rows"]) if "rows" in kwargs else None))
        return step(tokens, state, **kwargs)

    model.step = counting
    hyps = beam_search(model, batch, beam=3, max_len=10, nbest=3)
    assert sizes[0] == (4, None) and sizes[1][0] == 12
    del model.step
    _same(hyps, beam_search(model, batch, beam=3, max_len=10, nbest=3))
