"""Tests for syntaxnmt.decoding.constraints: lexically constrained beam search (dynamic beam
allocation over a constraint trie) through syntaxnmt.decoding.search, on tiny random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_search import V, _batch, _model, _same

from syntaxnmt.config import ModelConfig, SyntaxConfig, load_config
from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.features import SourceAnnotation, pad_features, sentence_features
from syntaxnmt.data.subwords import Tokenizer, train_sentencepiece
from syntaxnmt.decoding.constraints import BeamConstraints, ConstraintTrie, allocate, met_all, phrase_ids, read_constraint_lines
from syntaxnmt.decoding.ensemble import Ensemble
from syntaxnmt.decoding.search import beam_search, greedy_search, length_penalty, max_output_lengths, search
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import EOS, PAD
from syntaxnmt.model.factory import build_model

# ------------------------------------------------------------------ the trie and the banks by hand


def _walk(trie: ConstraintTrie, sentence: int, tokens: list[int]) -> list[tuple[int, list[int], set[int]]]:
    """After each token: (tokens still needed, the meets of each constraint, the advancing tokens)."""
    sent = torch.tensor(sentence)
    node, count = trie.root[sentence].clone(), torch.zeros(trie.length.size(1), dtype=torch.long)
    out = []
    for tok in tokens:
        node, count = trie.advance(node, count, sent, torch.tensor(tok))
        forward = {int(t) for t in trie.forward_tokens(node, count, sent) if t >= 0}
        out.append((int(trie.remaining(node, count, sent)), count.tolist(), forward))
    return out


def test_the_trie_shares_prefixes_and_counts_repeated_phrases():
    trie = ConstraintTrie.build([[[5, 6], [5, 7], [9]], [], [[5], [5]], None, [[5], [5, 6]]])
    assert trie.root.tolist() == [0, 5, 6, 8, 9]  # sentence 0: root, 5, 5-6, 5-7, 9; 1: root; 2: root, 5; 3: root; 4: root, 5, 5-6
    assert trie.length.tolist() == [[2, 2, 1], [0, 0, 0], [1, 0, 0], [0, 0, 0], [1, 2, 0]]
    assert trie.need.tolist() == [[1, 1, 1], [0, 0, 0], [2, 0, 0], [0, 0, 0], [1, 1, 0]]
    assert trie.total(torch.arange(5)).tolist() == [5, 0, 2, 0, 3]
    assert sorted(t for t in trie.child_tok[0].tolist() if t >= 0) == [5, 9] and sorted(t for t in trie.child_tok[1].tolist() if t >= 0) == [6, 7]
    assert trie.width == 2


def test_advancing_dropping_and_restarting_a_phrase():
    trie = ConstraintTrie.build([[[5, 6], [5, 7], [9]]])
    steps = _walk(trie, 0, [5, 8, 5, 5, 7, 9, 4, 5, 6])
    assert steps == [
        (4, [0, 0, 0], {6, 7}),  # 5 starts both 5-6 and 5-7
        (5, [0, 0, 0], {5, 9}),  # 8 drops it: back at the root
        (4, [0, 0, 0], {6, 7}),
        (4, [0, 0, 0], {6, 7}),  # 5 again: the phrase in progress is dropped, a new one starts
        (3, [0, 1, 0], {5, 9}),  # 5-7 met
        (2, [0, 1, 1], {5}),  # 9 met; only 5-6 left
        (2, [0, 1, 1], {5}),
        (1, [0, 1, 1], {6}),  # 5 no longer leads to the met 5-7
        (0, [1, 1, 1], set()),
    ]


def test_a_phrase_and_its_prefix_and_a_repeated_phrase():
    trie = ConstraintTrie.build([[[5], [5, 6]], [[5], [5]]])
    assert _walk(trie, 0, [5, 6]) == [(1, [1, 0], {6}), (0, [1, 1], set())]  # "5" met and "5 6" under way at once
    assert _walk(trie, 0, [5, 4, 5, 6]) == [(1, [1, 0], {6}), (2, [1, 0], {5}), (1, [1, 0], {6}), (0, [1, 1], set())]
    assert _walk(trie, 1, [5, 4, 5]) == [(1, [1, 0], {5}), (1, [1, 0], {5}), (0, [2, 0], set())]  # given twice: needed twice


def _reference(phrases: list[tuple[int, ...]], tokens: list[int]) -> list[tuple[int, list[int], set[int]]]:
    """:func:`_walk` the plain way, one hypothesis with the phrase in progress as a tuple: continue
    it, else drop it and start from the token, else nothing; a phrase completed while needed
    counts; the prefix stays only while a needed phrase goes on from it."""
    distinct = list(dict.fromkeys(phrases))
    need = {p: phrases.count(p) for p in distinct}
    count = dict.fromkeys(distinct, 0)
    prefix: tuple[int, ...] = ()
    out = []
    for tok in tokens:
        unmet = [p for p in distinct if count[p] < need[p]]
        live = lambda pre: any(p[: len(pre)] == pre for p in unmet)  # noqa: E731
        prefix = prefix + (tok,) if live(prefix + (tok,)) else (tok,) if live((tok,)) else ()
        if prefix in unmet:
            count[prefix] += 1
        unmet = [p for p in distinct if count[p] < need[p]]
        if not any(len(p) > len(prefix) and p[: len(prefix)] == prefix for p in unmet):
            prefix = ()
        left = sum((need[p] - count[p]) * len(p) for p in distinct) - len(prefix)
        forward = {p[len(prefix)] for p in unmet if len(p) > len(prefix) and p[: len(prefix)] == prefix}
        out.append((left, [count[p] for p in distinct] + [0] * (3 - len(distinct)), forward))
    return out


def test_the_vectorized_states_follow_a_plain_reference():
    """Random phrases over a 4-token alphabet (shared prefixes, a phrase inside another, repeats)
    and random token streams: the trie's states equal the plain reference's at every token."""
    rng = np.random.default_rng(0)
    sentences = [[tuple(int(x) for x in rng.integers(5, 9, rng.integers(1, 4))) for _ in range(rng.integers(1, 4))] for _ in range(60)]
    trie = ConstraintTrie.build([[list(p) for p in ps] for ps in sentences])
    assert trie.length.size(1) == 3
    for i, phrases in enumerate(sentences):
        tokens = [int(x) for x in rng.integers(5, 9, 14)]
        assert _walk(trie, i, tokens) == _reference(phrases, tokens), (phrases, tokens)


def test_allocation_is_round_robin_over_the_banks_with_finished_hypotheses_first():
    score = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, float("-inf")]])
    bank = torch.tensor([[0, 0, 0, 1, 2, 2, 2]])
    finished = torch.zeros_like(bank, dtype=torch.bool)
    assert allocate(score, bank, finished, 3).tolist() == [[0, 3, 4]]  # the best of each bank
    assert allocate(score, bank, finished, 5).tolist() == [[0, 1, 3, 4, 5]]  # then the second of each (bank 1 has none)
    assert allocate(score, torch.zeros_like(bank), finished, 4).tolist() == [[0, 1, 2, 3]]  # one bank: the top-k
    finished[0, 1] = True  # finished among the 3 best: keeps its slot
    assert allocate(score, bank, finished, 3).tolist() == [[1, 3, 4]]
    finished[0, 1], finished[0, 5] = False, True  # finished outside the 3 best: no slot
    assert allocate(score, bank, finished, 3).tolist() == [[0, 3, 4]]
    assert allocate(score, bank, finished, 7).tolist() == [[0, 1, 2, 3, 4, 5, 6]]  # what is left fills the rest, by score
    # every sentence of a batch at once
    two = allocate(torch.cat([score, score.flip(1)]), torch.cat([bank, bank]), torch.zeros(2, 7, dtype=torch.bool), 3)
    assert two.tolist() == [[0, 3, 4], [6, 3, 2]]  # sentence 2: the best of bank 2 (-1), bank 1 (-4), bank 0 (-5), by score


# ------------------------------------------------------------------ the search


def _hyp_ok(h, cons, limit: int, alpha: float = 1.0) -> None:
    assert met_all(h.tokens, cons), (h.tokens, cons)
    assert len(h.tokens) <= limit and all(t not in (PAD, EOS) for t in h.tokens)
    assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens) + 1, alpha), abs=1e-4)


CONSTRAINTS_7 = [[[7, 8]], [], [[10], [12, 13, 14]], None, [[5]], [[9, 9]], [[20], [21, 22]]]


@pytest.mark.parametrize("beam", [1, 4, 8])
@pytest.mark.parametrize("sentences", [1, 7])
def test_every_constraint_appears_in_every_output(beam, sentences):
    """Batches of 1 and 7 sentences with 0, 1 or 2 constraints each (phrases of 1 to 3 tokens, a
    repeated token): every hypothesis of the n-best list (3, or 1 at beam 1) contains them all,
    within its length limit, its score its log-probability over its length penalty; none of the
    constrained 1-best outputs has them without the constraints."""
    model = _model(0)
    lengths = (5, 3, 9, 1, 6, 2, 7)[:sentences] if sentences == 7 else (5,)
    cons = CONSTRAINTS_7[:sentences] if sentences == 7 else [[[12, 13], [6]]]
    batch = _batch(lengths, 1)
    limits = max_output_lengths(torch.tensor(lengths), 1.0, 6, 64)
    nbest = min(3, beam)
    out = search(model, batch, beam, limits, nbest=nbest, constraints=cons)
    plain = search(model, batch, beam, limits, nbest=1)
    for hyps, c, p, limit in zip(out, cons, plain, limits.tolist()):
        assert len(hyps) == nbest
        for h in hyps:
            _hyp_ok(h, c, limit)
        if c:
            assert not met_all(p[0].tokens, c)  # the constraints changed the output
        else:
            assert hyps[0].tokens == p[0].tokens  # a sentence without constraints is searched as before
        assert len({tuple(h.tokens) for h in hyps}) == nbest


def test_random_constraints_always_appear():
    """Random batches, beams, limits (some just fitting) and phrases (shared prefixes, repeats,
    phrases inside others): every hypothesis of every n-best list meets its constraints."""
    rng = np.random.default_rng(1)
    model = _model(11)
    for trial in range(12):
        n = int(rng.integers(1, 6))
        lengths = [int(x) for x in rng.integers(1, 10, n)]
        cons = [[[int(x) for x in rng.integers(4, 9, rng.integers(1, 4))] for _ in range(rng.integers(0, 4))] for _ in range(n)]
        need = [sum(len(c) for c in cs) for cs in cons]
        limits = torch.tensor([max(m, int(rng.integers(m, m + 4))) for m in need]).clamp(min=1)
        beam = int(rng.choice([1, 2, 5]))
        out = search(model, _batch(lengths, trial), beam, limits, nbest=beam, alpha=float(rng.choice([0.0, 1.0])), constraints=cons)
        for hyps, c, limit in zip(out, cons, limits.tolist()):
            assert hyps and all(met_all(h.tokens, c) and len(h.tokens) <= limit for h in hyps), (c, limit, [h.tokens for h in hyps])


@pytest.mark.parametrize("lp", [("power", 0.0), ("power", 1.0), ("gnmt", 0.6)])
def test_constraints_with_length_penalties_and_the_coverage_penalty(lp):
    model = _model(2)
    batch = _batch((4, 8, 2, 6), 2)
    cons = [[[6, 7]], [[11]], [[4], [15, 16]], []]
    for coverage in (0.0, 0.3):
        for hyps, c in zip(search(model, batch, 4, 14, nbest=2, alpha=lp[1], lp_type=lp[0], coverage_penalty=coverage, constraints=cons), cons):
            for h in hyps:
                assert met_all(h.tokens, c) and len(h.tokens) <= 14
                if not coverage:
                    assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens) + 1, lp[1], lp[0]), abs=1e-4)


def test_no_constraints_change_nothing():
    """constraints None, [] or [None]/[[]] per sentence: the unconstrained search, bit for bit
    (greedy and beam); a constrained sentence leaves its
    neighbours' outputs as they are alone."""
    model = _model(3)
    batch = _batch((3, 9, 1, 6), 3)
    for beam, nbest in ((1, 1), (4, 2)):
        plain = search(model, batch, beam, 12, nbest=nbest)
        for cons in (None, [], [None] * 4, [[]] * 4, [[], None, [[]], []]):
            assert [[(h.tokens, h.score, h.log_prob) for h in nb] for nb in search(model, batch, beam, 12, nbest=nbest, constraints=cons)] == [[(h.tokens, h.score, h.log_prob) for h in nb] for nb in plain]
        mixed = search(model, batch, beam, 12, nbest=nbest, constraints=[[], [[5, 6]], None, []])
        _same([mixed[i] for i in (0, 2, 3)], [plain[i] for i in (0, 2, 3)])
    assert greedy_search(model, batch, 12)[0][0].tokens == search(model, batch, 1, 12, constraints=None)[0][0].tokens


def test_constraints_as_arrays_and_tensors():
    model = _model(1)
    batch = _batch((4, 6), 1)
    expected = search(model, batch, 3, 12, constraints=[[[6, 7]], [[9], [10, 11]]])
    _same(search(model, batch, 3, 12, constraints=[[np.array([6, 7])], (torch.tensor([9]), np.array([10, 11]))]), expected)
    _same(search(model, batch, 3, 12, constraints=[np.array([[6, 7]]), None]), search(model, batch, 3, 12, constraints=[[[6, 7]], []]))


def test_a_met_constraint_costs_nothing():
    """Constraints the unconstrained best output already contains leave it the best output."""
    model = _model(4)
    batch = _batch((5, 7), 4)
    plain = beam_search(model, batch, 4, 12)
    cons = [[h[0].tokens[1:3]] for h in plain]
    assert all(len(c[0]) == 2 for c in cons)
    _same(beam_search(model, batch, 4, 12, constraints=cons), plain)


def test_constraints_that_cannot_fit_are_one_error_naming_the_sentence():
    model = _model(5)
    batch = make_batch([np.array([5, 6, 7]), np.array([8, 9])], None, [10, 11])
    with pytest.raises(UserError, match=r"sentence 12: its constraints take 7 target tokens, more than its output length limit of 6"):
        search(model, batch, 4, torch.tensor([8, 6]), constraints=[[[5, 6]], [[4, 5, 6, 7], [8, 9, 10]]])
    out = search(model, batch, 4, torch.tensor([8, 7]), nbest=4, constraints=[[[5, 6]], [[4, 5, 6, 7], [8, 9, 10]]])
    assert [h.tokens for h in out[1]] in ([[4, 5, 6, 7, 8, 9, 10], [8, 9, 10, 4, 5, 6, 7]], [[8, 9, 10, 4, 5, 6, 7], [4, 5, 6, 7, 8, 9, 10]])  # exactly fits: 2 outputs only
    assert len(out[0]) == 4 and all(met_all(h.tokens, [[5, 6]]) for h in out[0])
    with pytest.raises(UserError, match="sentence 11: constraint .* token id 3"):
        search(model, batch, 4, 8, constraints=[[[5, EOS]], []])
    with pytest.raises(UserError, match=f"sentence 12: constraint token id {V} is outside the target vocabulary"):
        search(model, batch, 2, 8, constraints=[[[5]], [[6, V]]])


def test_an_ensemble_an_rnn_and_a_syntax_model_meet_their_constraints():
    cfg = load_config(None, ["--model.arch=rnn", "--model.d_model=16", "--model.dropout=0.0"])
    torch.manual_seed(1)
    rnn = build_model(cfg.model, V, V).eval()
    ensemble = Ensemble([_model(6), _model(7)]).eval()
    batch = _batch((4, 8, 2), 6)
    cons = [[[6, 7], [9]], [], [[13, 14, 15]]]
    for model in (ensemble, rnn):
        for beam in (1, 3):
            for hyps, c in zip(search(model, batch, beam, 12, nbest=beam, constraints=cons), cons):
                assert len(hyps) == beam and all(met_all(h.tokens, c) for h in hyps)
    # a syntax-enriched Transformer: dependency relations in its encoder's attention, tags as input features
    model, sbatch = _syntax_model_and_batch()
    cons = [[[20, 21]], [[30]]]
    plain = search(model, sbatch, 3, 10)
    for hyps, c in zip(search(model, sbatch, 3, 10, nbest=2, constraints=cons), cons):
        assert all(met_all(h.tokens, c) for h in hyps)
    assert not any(met_all(p[0].tokens, c) for p, c in zip(plain, cons))


def _syntax_model_and_batch():
    """A random Transformer whose encoder reads tree distances, the parent's position and UPOS tags
    (tests/model/test_syntax_attention.py's model), and two annotated sentences."""
    torch.manual_seed(0)
    syntax = SyntaxConfig(relations=[["tree_distance", "linear", "none", "none"]], parent_scaled=[[False, False, True, False]], input_features=["upos"])
    cfg = ModelConfig(d_model=16, heads=4, ffn_dim=32, enc_layers=1, dec_layers=1, dropout=0.0, syntax=syntax)
    model = build_model(cfg, 40, 40, upos=8, xpos=8, deprel=9, bie=6).eval()
    words, tags, heads = [[7, 8, 9, 10], [11, 12]], [[3, 4, 5, 3], [4, 5]], [[2, 0, 2, 3], [0, 1]]
    batch = make_batch([np.array(w) for w in words], None, range(2))
    anns = [SourceAnnotation(np.arange(len(w)), np.array(h), {"upos": np.array(t), "deprel": np.array(t), "xpos": np.array(t)}) for w, t, h in zip(words, tags, heads)]
    batch.features = pad_features([sentence_features(a, model.feature_spec) for a in anns], batch.src.size(1))
    return model, batch


def test_a_han_model_meets_its_constraints_with_its_document_context():
    """A (random) HAN Transformer reading the encoder states of the previous sentences, gathered
    as the document translation does (:class:`~syntaxnmt.decoding.translate.DocumentStates`)."""
    from syntaxnmt.decoding.documents import DocumentStates
    from syntaxnmt.model.transformer import Transformer

    torch.manual_seed(8)
    cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, enc_layers=1, dec_layers=1, dropout=0.0, max_positions=64, context={"kind": "han", "sentences": 2})
    model = Transformer(cfg, V, V).eval()
    rng = np.random.default_rng(8)
    sources = [rng.integers(4, V, n) for n in (4, 6, 3, 5)]
    previous = np.array([[-1, -1], [0, -1], [1, 0], [-1, -1]])
    states = DocumentStates(model, sources, torch.device("cpu"), 8)
    states.encode(np.arange(4))
    batch = make_batch(sources, None, range(4))
    batch.context_states = states.gather(previous, False)
    cons = [[[5]], [[6, 7]], [], [[8], [9, 10]]]
    for hyps, c in zip(search(model, batch, 3, 12, nbest=2, constraints=cons), cons):
        assert all(met_all(h.tokens, c) for h in hyps)


def test_beam_constraints_follow_sentences_leaving_the_batch():
    """Sentences end at different steps and leave the batch: the states of the others stay theirs
    (each sentence gets what it gets alone)."""
    model = _model(9)
    lengths = (2, 10, 4, 7)
    batch = _batch(lengths, 9)
    cons = [[[5]], [[6, 7], [8]], [], [[11, 12]]]
    together = search(model, batch, 4, 14, nbest=2, constraints=cons)
    for i in range(len(lengths)):
        single = make_batch([batch.src[i][batch.src[i] != PAD][:-1].numpy()], None, [i])
        _same([together[i]], search(model, single, 4, 14, nbest=2, constraints=[cons[i]]))


def test_state_bookkeeping_shapes():
    cons = BeamConstraints.build([[[5, 6]], []], torch.tensor([9, 9]), 3)
    assert cons.node.shape == (2, 3) and cons.count.shape == (2, 3, 1) and cons.width == 1
    cons.keep(torch.tensor([1]))
    assert cons.sent.tolist() == [1]


# ------------------------------------------------------------------ constraints in words


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    words = "the a big small red dog cat house sees runs near new york city hall 's , .".split()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, 8)) for _ in range(300)]
    return train_sentencepiece(lines, tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=60)


def test_phrases_are_segmented_as_the_training_targets(spm_model):
    """Lowercased and Moses-tokenized as configured, then SentencePiece: the ids the target side's
    encode gives the same words inside a sentence."""
    tok = Tokenizer(spm_model, "en", moses=True, lowercase=True)
    ids = phrase_ids(tok, ["New York's", "Big red DOG"])
    assert ids == [tok.encode("new york's"), tok.encode("big red dog")]
    assert [tok.id_to_piece(i) for i in ids[1]] == tok.pieces("big red dog")
    sentence = tok.encode("The big red dog runs near New York's city hall.")
    for phrase in ids:  # the same pieces inside a sentence
        assert any(sentence[i : i + len(phrase)] == phrase for i in range(len(sentence)))
    assert tok.decode(ids[0]) == "new york's"
    with pytest.raises(UserError, match="line 3: constraint 'Zürich' has a piece outside"):
        phrase_ids(tok, ["dog", "Zürich"], "line 3")
    with pytest.raises(UserError, match="line 4: empty constraint"):
        phrase_ids(tok, ["  "], "line 4")


def test_constraints_in_words_appear_in_the_decoded_text(spm_model):
    """What a user gets: the detokenized translation of a (random) model contains the phrase."""
    tok = Tokenizer(spm_model, "en", moses=True, lowercase=True)
    torch.manual_seed(3)
    cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, enc_layers=1, dec_layers=1, dropout=0.0, max_positions=64)
    from syntaxnmt.model.transformer import Transformer

    model = Transformer(cfg, len(tok), len(tok)).eval()
    batch = make_batch([np.asarray(tok.encode(s)) for s in ("the dog sees a cat", "a house near the city")], None, [0, 1])
    phrases = [["New York", "red cat"], ["city hall"]]
    cons = [phrase_ids(tok, p) for p in phrases]
    for hyps, p in zip(search(model, batch, 4, 16, constraints=cons), phrases):
        text = tok.decode(hyps[0].tokens)
        assert all(x.lower() in text for x in p), (text, p)


@pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")
def test_the_cpu_execution_finds_the_plain_models_constrained_hypotheses(monkeypatch):
    """With constraints a model given the CPU's execution (its attentions stepped in the C kernels)
    finds the hypotheses of the model as built: beams 1, 3 and 5, tight length limits (rows that
    must write their constraint tokens), min_len, a Transformer and an RNN."""
    import copy

    from syntaxnmt.cpu import attention as cpu_attention
    from syntaxnmt.cpu import install

    steps = []
    native_step = cpu_attention.native_step
    monkeypatch.setattr(cpu_attention, "native_step", lambda *a: steps.append(1) or native_step(*a))
    cfg = load_config(None, ["--model.arch=rnn", "--model.d_model=16", "--model.dropout=0.0"])
    torch.manual_seed(2)
    rnn = build_model(cfg.model, V, V).eval()
    batch = _batch((5, 3, 9, 1, 6, 2, 7), 5)
    for model in (_model(10), rnn):
        fast = install(copy.deepcopy(model))
        for kwargs in ({"beam": 1, "max_len": 12}, {"beam": 3, "max_len": 12, "nbest": 3}, {"beam": 5, "max_len": 5, "min_len": 2, "nbest": 2}, {"beam": 4, "max_len": torch.tensor([4, 6, 9, 3, 5, 7, 8])}):
            steps.clear()
            hyps = search(fast, batch, **kwargs, constraints=CONSTRAINTS_7)
            assert bool(steps) == (model is not rnn)  # the Transformer's attentions stepped in the C kernels
            _same(hyps, search(model, batch, **kwargs, constraints=CONSTRAINTS_7))
            for nbest, c in zip(hyps, CONSTRAINTS_7):
                assert all(met_all(h.tokens, c) for h in nbest)


def test_a_constraints_file_has_one_line_per_input_line(tmp_path):
    path = tmp_path / "cons.txt"
    path.write_text("Stadt\tNew York\n\n  rotes Haus \t\n", encoding="utf-8")
    assert read_constraint_lines(path, 3) == [["Stadt", "New York"], [], ["rotes Haus"]]
    with pytest.raises(UserError, match="cons.txt: 3 lines of constraints for 4 input lines"):
        read_constraint_lines(path, 4)
    with pytest.raises(UserError, match="none.txt: constraints file not found"):
        read_constraint_lines(tmp_path / "none.txt")


def test_the_pieces_that_continue_a_word(tmp_path):
    """What may not follow a completed phrase (:class:`BatchConstraints`): pieces without the word
    boundary that hold a letter or digit; not those starting a word, punctuation, or the specials."""
    import numpy as np

    from syntaxnmt.data.subwords import Tokenizer, train_sentencepiece
    from syntaxnmt.decoding.constraints import BatchConstraints, continuing_pieces

    lines = [" ".join(np.random.default_rng(i).choice("hund hunde hunden katze katzen , . !".split(), 6)) + "." for i in range(200)]
    tok = Tokenizer(train_sentencepiece(lines, tmp_path / "spm.model", vocab_size=40), "de")
    cont = continuing_pieces(tok)
    pieces = [tok.sp.id_to_piece(i) for i in range(len(tok))]
    assert len(cont) == len(pieces)
    for i, p in enumerate(pieces):
        expected = not p.startswith("\u2581") and any(c.isalnum() for c in p) and not tok.sp.is_control(i) and not tok.sp.is_unknown(i)
        assert bool(cont[i]) == expected, p
    assert cont.any() and not cont[[0, 1, 2, 3]].any()  # pad, unk, bos, eos
    assert any(p.startswith("\u2581") for p in pieces) and any(p in (".", ",", "!") and not cont[i] for i, p in enumerate(pieces))
    batch = BatchConstraints([[[5]], None, [[6, 7]]], cont)
    sub = batch.subset([2, 0])
    assert sub == [[[6, 7]], [[5]]] and sub.continuing is cont


def test_the_word_end_rule_holds_through_punctuation_glued_to_the_phrase():
    """After a phrase is completed the rule of :class:`BatchConstraints` holds until a word boundary:
    through a glued punctuation piece ("Texas" "-") too, so that "Texas-BB" cannot follow (it
    did: test_2016_flickr line 905 with the recipe model, the one term of 1,198 missed)."""
    from syntaxnmt.decoding.constraints import BatchConstraints, BeamConstraints

    V = 12
    continuing = torch.zeros(V, dtype=torch.bool)
    continuing[9] = True  # "BB": goes on with the word before it
    glue = torch.zeros(V, dtype=torch.bool)
    glue[8] = True  # "-": no letter, no word boundary
    state = BeamConstraints.build(BatchConstraints([[[5]]], continuing, glue), torch.tensor([10]), 1)
    done = torch.zeros(1, 1, dtype=torch.bool)
    closing = []
    for token in (5, 8, 8, 10, 8):  # the phrase, "-", "-", a new word, "-"
        state.select(torch.zeros(1, 1, 1), torch.tensor([[[token]]]), done, 1)
        closing.append(bool(state.closing[0, 0]))
    assert closing == [True, True, True, False, False]
    # Without the glue mask (a word vocabulary, or before this rule) only the completing step closes.
    state = BeamConstraints.build(BatchConstraints([[[5]]], continuing), torch.tensor([10]), 1)
    state.select(torch.zeros(1, 1, 1), torch.tensor([[[5]]]), done, 1)
    state.select(torch.zeros(1, 1, 1), torch.tensor([[[8]]]), done, 1)
    assert not bool(state.closing[0, 0])
