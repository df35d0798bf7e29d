"""Attention as alignment in training and decoding: config keys, prepared subword alignments,
guided alignment and coverage/fertility in the loop, the coverage penalty in beam search, and
joint (bilingual symmetry) training."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import deep_merge, quiet, tiny_tree

from syntaxnmt.config import load_config, parse_overrides
from syntaxnmt.data.batches import Split, collate, make_batch
from syntaxnmt.data.links import read_alignments, subwords_to_words
from syntaxnmt.data.prepare import load_split, load_tokenizers, prepare
from syntaxnmt.decoding.search import beam_search
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD
from syntaxnmt.model import build_model
from syntaxnmt.training.alignment import AlignmentObjective, alignment_attention, alignment_objective, coverage_loss, guided_alignment_loss, leak_loss, word_masks
from syntaxnmt.training.optim import build_optimizer
from syntaxnmt.training.step import update


@pytest.fixture(scope="module")
def aligned_prepared(corpus, tmp_path_factory):
    """A prepared cache of the tiny corpus with its gold training alignments."""
    prepared = tmp_path_factory.mktemp("prepared_align")
    tree = deep_merge(tiny_tree(corpus, tmp_path_factory.mktemp("w"), prepared), {"data": {"train_align": str(corpus["train"]["align"])}})
    prepare(load_config(None, tree), log=quiet)
    return prepared


@pytest.fixture
def aligned_config(corpus, aligned_prepared, tmp_path):
    def make(alignment: dict | None = None, **extra):
        tree = deep_merge(tiny_tree(corpus, tmp_path / "run", aligned_prepared), {"data": {"train_align": str(corpus["train"]["align"])}, "train": {"alignment": alignment or {}}})
        return load_config(None, deep_merge(tree, extra))

    return make


def _model(cfg):
    toks = load_tokenizers(cfg)
    return build_model(cfg, len(toks.src), len(toks.tgt))


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["--train.alignment.layer=1"], "train.alignment.layer 1 out of range"),  # one decoder layer
        (["--train.alignment.head=-5"], "train.alignment.head -5 out of range"),
        (["--train.alignment.layer=first"], "train.alignment.layer"),
        (["--train.alignment.guided_weight=0.5"], "needs data.train_align"),
        (["--train.alignment.fertility=true"], "coverage_weight"),
        (["--train.alignment.coverage_weight=-1"], "must be >= 0"),
        (["--train.alignment.guided_decay=linear"], "needs an argument"),
        (["--train.alignment.guided_decay=exp:2"], "(0, 1]"),
        (["--train.alignment.max_fertility=0", "--train.alignment.coverage_weight=1"], "max_fertility"),
        (["--decode.coverage_penalty=-0.1"], "coverage_penalty"),
        (["--train.alignment.lambda=1"], "unknown key 'train.alignment.lambda'"),
        (["--model.arch=rnn", "--train.alignment.head=1"], "out of range"),
    ],
)
def test_config_rejects_bad_alignment_keys(corpus, tmp_path, overrides, fragment):
    with pytest.raises(UserError) as err:
        load_config(None, deep_merge(tiny_tree(corpus, tmp_path), parse_overrides(overrides)))
    assert fragment in str(err.value)


def test_config_accepts_alignment_keys(aligned_config):
    cfg = aligned_config({"guided_weight": 0.5, "guided_decay": "linear:100", "layer": -1, "head": 3, "coverage_weight": 0.1, "fertility": True}, decode={"coverage_penalty": 0.2})
    a = cfg.train.alignment
    assert (a.guided_weight, a.layer, a.head, a.fertility, cfg.decode.coverage_penalty) == (0.5, -1, 3, True, 0.2)
    assert load_config(None).train.alignment.layer == "average"
    assert alignment_objective(load_config(None)) is None  # the default path stays plain


# ---------------------------------------------------------------- prepare and collate


def test_prepared_subword_alignments_round_trip(corpus, aligned_prepared):
    split = Split.load(aligned_prepared, "train")
    gold = read_alignments(corpus["train"]["align"])
    lines = [int(x) for x in (aligned_prepared / "train.lines").read_text().split()]
    assert len(split["align"]) == len(split) == len(lines)
    for k in range(len(split)):
        links = {tuple(x) for x in split["align"][k].reshape(-1, 2).tolist()}
        n_src, n_tgt = len(split["src"][k]), len(split["tgt"][k])
        assert all(0 <= i < n_src and 0 <= j < n_tgt for i, j in links)
        assert len(split["tgt_word"][k]) == n_tgt
        assert subwords_to_words(links, split["src_word"][k], split["tgt_word"][k]) == gold[lines[k] - 1][0]


def test_prepare_alignment_errors_name_the_line(corpus, tmp_path):
    lines = corpus["train"]["align"].read_text().splitlines()
    bad = tmp_path / "bad.align"
    for content, fragment in [
        (lines[:-1], "alignment lines but the training files have"),
        (lines[:6] + ["0-0 99-1"] + lines[7:], "bad.align:7: alignment link '99-1': source index out of range"),
        (lines[:2] + ["0-0 1_1"] + lines[3:], "bad.align:3: malformed alignment link '1_1'"),
    ]:
        bad.write_text("\n".join(content) + "\n")
        cfg = load_config(None, deep_merge(tiny_tree(corpus, tmp_path / "w", tmp_path / "prep"), {"data": {"train_align": str(bad)}}))
        with pytest.raises(UserError) as err:
            prepare(cfg, log=quiet)
        assert fragment in str(err.value)


def test_collate_builds_the_reference_only_when_asked(aligned_config, shared_prepared_dir):
    cfg = aligned_config()
    split = load_split(cfg, "train")
    plain = collate(split, [0, 1, 2])
    assert plain.alignment is None
    batch = collate(split, [0, 1, 2], alignment=True)
    assert batch.alignment.shape == (3, batch.tgt_out.size(1), batch.src.size(1))
    rows = batch.alignment.sum(-1)
    assert torch.all((rows - 1).abs().lt(1e-6) | rows.eq(0))
    assert rows[batch.tgt_out.eq(PAD) | batch.tgt_out.eq(EOS)].eq(0).all()  # EOS and padding have no links
    assert batch.alignment[batch.src_pad_mask[:, None, :].expand_as(batch.alignment)].eq(0).all()
    with pytest.raises(UserError, match="data.train_align"):
        collate(Split.load(shared_prepared_dir, "train"), [0], alignment=True)


# ---------------------------------------------------------------- training terms


@pytest.mark.parametrize("extra", [{}, {"full_context": True, "leaky": True}], ids=["causal", "full-context-leaky"])
def test_guided_loss_decreases_in_training(aligned_config, extra):
    cfg = aligned_config({"guided_weight": 5.0, "layer": 0, "head": 0, **extra}, train={"lr": 5e-3})
    torch.manual_seed(1)
    model = _model(cfg)
    opt, sched = build_optimizer(model, cfg.train)
    split = load_split(cfg, "train")
    objective = alignment_objective(cfg)
    rng = np.random.default_rng(1)
    guided = []
    for step in range(30):
        group = [rng.choice(len(split), 48, replace=False)]
        stats = update(model, opt, sched, split, group, cfg.train, torch.device("cpu"), [objective], step)
        guided.append(float(stats["guided"]) / stats["tokens"])
    # Uniform attention over ~20 source pieces costs about log(20) = 3 per target token.
    assert np.mean(guided[-5:]) < 0.85 * np.mean(guided[:5]), guided


def test_default_training_does_not_ask_for_weights(make_config, monkeypatch):
    cfg = make_config()
    model = _model(cfg)
    calls = []
    original = model.forward
    monkeypatch.setattr(model, "forward", lambda batch, need_weights=False: calls.append(need_weights) or original(batch, need_weights))
    opt, sched = build_optimizer(model, cfg.train)
    split = load_split(cfg, "train")
    update(model, opt, sched, split, [np.arange(8)], cfg.train, torch.device("cpu"), [o for o in (alignment_objective(cfg),) if o])
    assert calls == [False]


def test_coverage_with_fertility_one_equals_plain_coverage(aligned_config):
    torch.manual_seed(0)
    plain_cfg = aligned_config({"coverage_weight": 1.0})
    fert_cfg = aligned_config({"coverage_weight": 1.0, "fertility": True, "max_fertility": 2.0})
    model = _model(fert_cfg).eval()
    with torch.no_grad():  # f_j = 2 * sigmoid(0) = 1
        model.fertility.proj.weight.zero_()
        model.fertility.proj.bias.zero_()
    batch = collate(load_split(plain_cfg, "train"), list(range(6)))
    out = model(batch, need_weights=True)
    plain = AlignmentObjective(plain_cfg.train.alignment).terms(model, batch, out)["coverage"]
    fert = AlignmentObjective(fert_cfg.train.alignment).terms(model, batch, out)["coverage"]
    assert fert.item() == pytest.approx(plain.item(), rel=1e-6)
    src_mask, tgt_mask = word_masks(batch.src, batch.tgt_out)
    by_hand = coverage_loss(alignment_attention(out, plain_cfg.train.alignment), src_mask, tgt_mask, reduction="sum")
    assert plain.item() == pytest.approx(by_hand.item(), rel=1e-6)
    # A learned fertility changes the term and receives gradient through it.
    with torch.no_grad():
        model.fertility.proj.bias.fill_(1.0)
    model.train()
    out = model(batch, need_weights=True)
    term = AlignmentObjective(fert_cfg.train.alignment).terms(model, batch, out)["coverage"]
    assert term.item() != pytest.approx(plain.item(), rel=1e-3)
    term.backward()
    assert model.fertility.proj.bias.grad.abs().item() > 0


def test_fertility_is_checkpointed_and_loaded(aligned_config):
    from syntaxnmt.checkpoint import load_checkpoint
    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.training.train import train

    cfg = aligned_config({"coverage_weight": 0.5, "fertility": True, "guided_weight": 0.5}, train={"max_steps": 3, "valid_every": 3, "valid_bleu": False})
    train(cfg, log=quiet)
    state = load_checkpoint(f"{cfg.work_dir}/best.pt")
    assert "fertility.proj.weight" in state["model"]
    model, _, _ = load_model(f"{cfg.work_dir}/best.pt", torch.device("cpu"))
    assert torch.equal(model.fertility.proj.weight, state["model"]["fertility.proj.weight"])


def test_terms_work_for_the_rnn_family(aligned_config):
    cfg = aligned_config({"guided_weight": 1.0, "coverage_weight": 1.0, "fertility": True, "layer": 0, "head": 0}, model={"arch": "rnn", "rnn": {"hidden": 16, "attention_dim": 16}})
    model = _model(cfg)
    batch = collate(load_split(cfg, "train"), [0, 1, 2], alignment=True)
    out = model(batch, need_weights=True)
    assert out.cross_attention[0].shape == (3, 1, batch.tgt_out.size(1), batch.src.size(1))
    terms = AlignmentObjective(cfg.train.alignment).terms(model, batch, out)
    assert set(terms) == {"guided", "coverage"} and all(torch.isfinite(v) for v in terms.values())
    sum(terms.values()).backward()
    assert model.fertility.proj.weight.grad is not None


# ---------------------------------------------------------------- full context and leaky attention


def test_leak_loss_by_hand():
    leak = torch.tensor([[0.5, 0.1, 0.25, 0.9]])
    ref = torch.zeros(1, 4, 3)
    ref[0, 1, 2] = 1.0  # position 1 is linked; 0 and 2 are not; 3 is padding
    pad = torch.tensor([[False, False, False, True]])
    assert leak_loss(leak, ref, pad, reduction="sum").item() == pytest.approx(-math.log(0.5) - math.log(0.25))


def test_guided_term_reads_the_full_context_pass_and_the_leak(aligned_config):
    cfg = aligned_config({"guided_weight": 1.0, "layer": -1, "head": 2, "full_context": True, "leaky": True}, model={"dec_layers": 2})
    torch.manual_seed(0)
    model = _model(cfg).train()
    batch = collate(load_split(cfg, "train"), list(range(6)), alignment=True)
    out = model(batch, need_weights=True)
    a = cfg.train.alignment
    assert model.alignment_pass.layer == 1
    attn = alignment_attention(out, a)
    assert torch.equal(attn, out.alignment_attention[:, 2])
    tgt_pad = batch.tgt_out.eq(PAD)
    g = guided_alignment_loss(attn, batch.alignment, batch.src_pad_mask, tgt_pad, reduction="none")
    by_hand = (g * (~tgt_pad).sum(1)).sum() + leak_loss(out.alignment_leak[:, 2], batch.alignment, tgt_pad, reduction="sum")
    term = AlignmentObjective(a).terms(model, batch, out)["guided"]
    assert term.item() == pytest.approx(by_hand.item(), rel=1e-6)
    # The term trains the supervised layer's attention (its self-attention too: the unmasked pass),
    # the leak and the layers below; the pass's output is not fed on (no gradient to the layer's
    # feed-forward block or the final norm).
    term.backward()
    layer = model.decoder[1]
    assert layer.self_attn.q_proj.weight.grad.abs().sum() > 0 and layer.cross_attn.leak.key.grad.abs().sum() > 0
    assert model.decoder[0].ffn.fc1.weight.grad.abs().sum() > 0
    assert layer.ffn.fc1.weight.grad is None and model.dec_norm.weight.grad is None


# ---------------------------------------------------------------- coverage penalty in beam search

W0, W1 = 4, 5  # target tokens; source: [x, y] (two words) + EOS


@dataclass
class _State:
    history: list[tuple[int, ...]]
    last_cross_attention: torch.Tensor | None = None


@dataclass
class _Encoding:
    src: torch.Tensor

    def index_select(self, index):
        return _Encoding(self.src.index_select(0, index))


class CoverageToy:
    """Hypothesis "W0 EOS" (P = 0.6) attends only source word 0; "W1 W1 EOS" (P = 0.4 * 0.9 * 0.9)
    attends word 0 then word 1, covering the whole source."""

    def encode(self, batch):
        return _Encoding(batch.src)

    def init_state(self, enc):
        return _State([() for _ in range(enc.src.size(0))])

    def step(self, tokens, state, need_weights=False):
        hist = [h + (t,) if t not in (BOS, PAD, EOS) else h for h, t in zip(state.history, tokens.tolist())]
        probs, attn = [], []
        for h in hist:
            p = [1e-4] * 6
            if not h:
                p[W0], p[W1] = 0.6, 0.4
                a = [1.0, 0.0, 0.0]
            elif h[0] == W0:
                p[EOS] = 1.0
                a = [1.0, 0.0, 0.0]
            elif len(h) == 1:
                p[W1], p[EOS] = 0.9, 0.1
                a = [0.0, 1.0, 0.0]
            else:
                p[EOS] = 0.9
                a = [0.0, 0.0, 1.0]
            probs.append(p)
            attn.append(a)
        state.history = hist
        state.last_cross_attention = torch.tensor(attn) if need_weights else None
        return torch.log(torch.tensor(probs)), state

    def reorder_state(self, state, index, sources_kept=False):
        return _State([state.history[i] for i in index.tolist()])


def test_coverage_penalty_changes_beam_ranking():
    model = CoverageToy()
    batch = make_batch([[7, 8]], None, [0])
    plain = beam_search(model, batch, beam=2, max_len=5, alpha=0.0, nbest=2)[0]
    assert plain[0].tokens == [W0]  # 0.6 > 0.324
    penalized = beam_search(model, batch, beam=2, max_len=5, alpha=0.0, nbest=2, coverage_penalty=0.5)[0]
    # W0 EOS attends word 0 twice and word 1 never: cp = 0.5 * log(1e-6) drops it from the beam;
    # W1 W1 EOS and W1 EOS cover both words (cp = 0) and keep their log-probabilities as scores.
    assert [h.tokens for h in penalized] == [[W1, W1], [W1]]
    assert penalized[0].score == pytest.approx(math.log(0.4 * 0.9 * 0.9), abs=1e-4)
    assert penalized[1].score == pytest.approx(math.log(0.4 * 0.1), abs=1e-4)
    # cp enters the score of the unpenalized winner of a plain search too.
    assert plain[0].score == pytest.approx(math.log(0.6), abs=1e-4)
    # A tiny beta leaves the ranking as it was.
    assert beam_search(model, batch, beam=2, max_len=5, alpha=0.0, coverage_penalty=1e-3)[0][0].tokens == [W0]


def test_coverage_penalty_with_a_transformer_changes_the_ranking(trained_run, corpus):
    from syntaxnmt.decoding.loading import load_model
    from syntaxnmt.decoding.translate import translate_ids
    from syntaxnmt.textio import read_lines

    model, cfg, toks = load_model(f"{trained_run.work_dir}/best.pt", torch.device("cpu"))
    sources = [np.asarray(s) for s in toks.src.encode_batch(read_lines(corpus["dev"]["src"])[:12])]

    def nbest(beta: float) -> list[list[tuple[int, ...]]]:
        decode = cfg.decode.model_copy(update={"coverage_penalty": beta})
        return [[tuple(h.tokens) for h in hyps] for hyps in translate_ids(model, sources, decode, torch.device("cpu"), beam=4, nbest=4)]

    plain, penalized = nbest(0.0), nbest(5.0)
    assert all(len(h) == 4 for h in plain + penalized)
    # A strong penalty reorders (or replaces) the n-best list of some sentence; a tiny one does not.
    assert plain != penalized
    assert nbest(1e-6) == plain


# ---------------------------------------------------------------- joint training


def test_one_joint_step_updates_both_models(aligned_config):
    from syntaxnmt.training.joint import DIRECTIONS, direction_configs, joint_update

    cfg = aligned_config({"symmetry_weight": 1.0, "guided_weight": 0.5}, train={"lr": 1e-2, "warmup_steps": 1, "label_smoothing": 0.0})
    fwd_cfg, rev_cfg = direction_configs(cfg)
    assert rev_cfg.data.src_lang == cfg.data.tgt_lang and rev_cfg.data.train_src == cfg.data.train_tgt
    torch.manual_seed(0)
    models = [_model(c) for c in (fwd_cfg, rev_cfg)]
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    optimizers = [build_optimizer(m, cfg.train) for m in models]
    split = load_split(cfg, "train")
    stats = joint_update(models, optimizers, split, [np.arange(16)], cfg, torch.device("cpu"), [[alignment_objective(c)] for c in (fwd_cfg, rev_cfg)])
    assert stats["bonus"] > 0 and stats["forward"] > 0 and stats["reverse"] > 0
    for name, model, old in zip(DIRECTIONS, models, before):
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, old[k])]
        assert "decoder.0.cross_attn.q_proj.weight" in changed, name
    # The bonus alone (no translation loss) sends gradient into both models.
    for m in models:
        m.zero_grad()
    fb = collate(split, list(range(4)))
    from syntaxnmt.training.alignment import trace_bonus

    rb = collate(split.swapped(), list(range(4)))
    a = cfg.train.alignment
    src_mask, tgt_mask = word_masks(fb.src, fb.tgt_out)
    bonus = trace_bonus(alignment_attention(models[0](fb, need_weights=True), a), alignment_attention(models[1](rb, need_weights=True), a), src_mask, tgt_mask, reduction="sum")
    bonus.backward()
    for m in models:
        assert m.decoder[0].cross_attn.k_proj.weight.grad.abs().sum() > 0
