"""Relation-aware heads (Shaw et al. 2018), linguistic heads, parent-scaled heads, input features."""

import math

import numpy as np
import pytest
import torch

from syntaxnmt.config import ModelConfig, SyntaxConfig, load_config
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.features import SourceAnnotation, pad_features, sentence_features
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import FeatureSpec, SourceFeatures
from syntaxnmt.model import build_model
from syntaxnmt.model.attention import MultiHeadAttention
from syntaxnmt.model.syntax_attention import LinguisticHeads, ParentScaled, RelationAttention
from syntaxnmt.syntax import RELATION_KINDS, SentenceTree


def test_zero_relation_embeddings_equal_plain_attention():
    torch.manual_seed(0)
    syn = SyntaxConfig(max_relative_position=3)
    rel = RelationAttention(["linear", "tree_distance", "none", "linear"], 8, syn)
    for emb in list(rel.key_emb.values()) + list(rel.value_emb.values()):
        torch.nn.init.zeros_(emb.weight)
    plain = MultiHeadAttention(32, 4)
    enriched = MultiHeadAttention(32, 4, extensions=[rel])
    enriched.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    ids = torch.randint(0, 5, (2, 5, 5))
    out_plain, w_plain = plain(x, key_padding_mask=pad, need_weights=True)
    out_rel, w_rel = enriched(x, key_padding_mask=pad, need_weights=True, features=SourceFeatures(relations={"tree_distance": ids, "linear": ids}))
    torch.testing.assert_close(out_rel, out_plain)
    torch.testing.assert_close(w_rel, w_plain)


def test_one_relation_head_on_three_tokens_by_hand():
    d = 2
    syn = SyntaxConfig(max_tree_distance=2)
    rel = RelationAttention(["tree_distance"], d, syn)
    mha = MultiHeadAttention(d, 1, extensions=[rel])
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(d))
            proj.bias.zero_()
        rel.key_emb["tree_distance"].weight.copy_(torch.arange(12.0).view(6, 2) / 10)
        rel.value_emb["tree_distance"].weight.copy_(-torch.arange(12.0).view(6, 2) / 7)
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, -1.0]]])
    ids = torch.tensor([[[3, 4, 5], [4, 3, 4], [5, 4, 3]]])
    out, w = mha(x, need_weights=True, features=SourceFeatures(relations={"tree_distance": ids}))

    X = x[0].numpy()
    aK = rel.key_emb["tree_distance"].weight.detach().numpy()
    aV = rel.value_emb["tree_distance"].weight.detach().numpy()
    R = ids[0].numpy()
    expected_w = np.zeros((3, 3))
    expected_z = np.zeros((3, 2))
    for i in range(3):
        e = np.array([X[i] @ (X[j] + aK[R[i, j]]) / math.sqrt(d) for j in range(3)])
        a = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
        expected_w[i] = a
        expected_z[i] = sum(a[j] * (X[j] + aV[R[i, j]]) for j in range(3))
    np.testing.assert_allclose(w[0, 0].detach().numpy(), expected_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[0].detach().numpy(), expected_z, rtol=1e-5, atol=1e-6)


def test_linear_relations_depend_on_offset_only():
    sentence = SentenceTree(np.array([0, 0, 1, -1]), np.zeros(0, dtype=np.int64))
    ids = RELATION_KINDS["linear"].ids(sentence, SyntaxConfig(max_relative_position=2))
    assert ids.tolist() == [[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]]


def _encoder_model(syntax: dict, seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=16, heads=4, ffn_dim=32, enc_layers=2, dec_layers=1, dropout=0.0, syntax=SyntaxConfig(**syntax))
    return build_model(cfg, 40, 40, upos=8, xpos=8, deprel=9, bie=6).eval()


def _batch(words, model, tags, heads):
    b = make_batch([np.array(w) for w in words], [np.array([5, 6])] * len(words), range(len(words)))
    anns = [SourceAnnotation(np.arange(len(w)), np.array(h), {"upos": np.array(t), "deprel": np.array(t), "xpos": np.array(t)}) for w, t, h in zip(words, tags, heads)]
    b.features = pad_features([sentence_features(a, model.feature_spec) for a in anns], b.src.size(1))
    return b


def test_specialized_heads_ignore_word_identity():
    model = _encoder_model({"qk_source": [["word", "upos", "word", "deprel"]]})
    tags, heads = [[3, 4, 5, 3]], [[2, 0, 2, 3]]
    b1 = _batch([[7, 8, 9, 10]], model, tags, heads)
    b2 = _batch([[20, 21, 22, 23]], model, tags, heads)  # other words, same tags
    e1, e2 = model.encode(b1, need_weights=True), model.encode(b2, need_weights=True)
    for layer in range(2):
        w1, w2 = e1.self_attention[layer][0], e2.self_attention[layer][0]
        torch.testing.assert_close(w1[1], w2[1])  # upos head
        torch.testing.assert_close(w1[3], w2[3])  # deprel head
        assert not torch.allclose(w1[0], w2[0])  # a word head does see the words
    b3 = _batch([[7, 8, 9, 10]], model, [[3, 3, 6, 4]], heads)  # same words, other tags
    e3 = model.encode(b3, need_weights=True)
    assert not torch.allclose(e1.self_attention[0][0, 1], e3.self_attention[0][0, 1])


def test_parent_scaled_multiplies_scores_by_gaussian():
    ext = ParentScaled([True, False], sigma=1.0)
    scores = torch.ones(1, 2, 3, 3)
    parent = torch.tensor([[1, 1, 0]])
    out = ext.scores(scores, None, SourceFeatures(parent=parent))
    gauss = lambda j, p: math.exp(-((j - p) ** 2) / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    expected = torch.tensor([[gauss(j, p) for j in range(3)] for p in (1, 1, 0)])
    torch.testing.assert_close(out[0, 0], expected)
    torch.testing.assert_close(out[0, 1], scores[0, 1])


def test_full_model_with_every_extension_runs_and_masks_padding():
    model = _encoder_model(
        {
            "relations": [["linear", "tree_distance", "tree_path", "none"], ["none", "linear", "linear", "tree_path"]],
            "qk_source": [["word", "word", "word", "upos"]],
            "parent_scaled": [[False, False, True, False]],
            "input_features": ["upos", "bie"],
        }
    )
    spec = model.feature_spec
    assert spec.relations == {"linear", "tree_distance", "tree_path"} and spec.tags == {"upos", "bie"} and spec.parent
    b = _batch([[7, 8, 9, 10], [11, 12]], model, [[3, 4, 5, 3], [4, 5]], [[2, 0, 2, 3], [0, 1]])
    out = model(b, need_weights=True)
    for w in out.encoder.self_attention:
        assert w[1, :, :, 3:].abs().max() == 0  # padding of the short sentence gets zero weight
    out.logits.sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if "key_emb" in n or "tag_emb" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_input_features_change_the_encoding_and_concat_keeps_d_model():
    for combine in ("add", "concat"):
        model = _encoder_model({"input_features": ["upos"], "feature_combine": combine, "feature_dim": 4})
        model.cfg.tie_embeddings  # noqa: B018
        b1 = _batch([[7, 8, 9]], model, [[3, 4, 5]], [[0, 1, 2]])
        b2 = _batch([[7, 8, 9]], model, [[3, 3, 5]], [[0, 1, 2]])
        h1, h2 = model.encode(b1).hidden, model.encode(b2).hidden
        assert h1.shape[-1] == 16
        assert not torch.allclose(h1, h2)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--model.syntax.relations=[[linear]]"], "1 entries for 4 heads"),
        (["--model.syntax.relations=[[linear, x, none, none]]"], "unknown value 'x'"),
        (["--model.syntax.qk_source=[[word, word, word, lemma]]"], "unknown value 'lemma'"),
        (["--model.syntax.parent_scaled=[[true, false]]"], "2 entries for 4 heads"),
        (["--model.syntax.relations=[[linear, none, none, none], [linear, none, none, none]]", "--model.enc_layers=3"], "2 rows"),
        (["--model.syntax.relations=[[tree_distance, none, none, none]]"], "set data.annotate"),
        (["--model.arch=rnn", "--model.syntax.relations=[[linear, none, none, none]]"], "Transformer-only"),
        (["--data.annotate=spacy", "--model.syntax.input_features=[upos, bie]", "--model.syntax.feature_combine=concat", "--model.syntax.feature_dim=128"], "leaves no room"),
    ],
)
def test_syntax_config_is_checked_when_loaded(overrides, message):
    with pytest.raises(UserError, match=message):
        load_config(None, overrides)


def test_linguistic_heads_need_the_tag_set():
    with pytest.raises(ValueError, match="no upos tags"):
        LinguisticHeads(["upos"], 4, 8, {})


def test_feature_spec_from_config():
    spec = FeatureSpec.from_config(SyntaxConfig(relations=[["linear", "none"]], input_features=["bie"]))
    assert spec.relations == {"linear"} and spec.tags == {"bie"} and not spec.needs_parse
    spec = FeatureSpec.from_config(SyntaxConfig(relations=[["tree_path", "none"]]))
    assert spec.relations == {"tree_path"} and spec.needs_parse


def test_a_new_relation_kind_needs_only_an_entry_in_the_table(monkeypatch):
    """The design promise: config validation, batch features and relation heads all read
    syntax.RELATION_KINDS, so a new kind is one table entry (here: same word or not)."""
    from syntaxnmt.syntax import RelationKind

    kind = RelationKind("same_word", False, lambda syn: 2, lambda sent, syn: (sent.word_of_piece[:, None] == sent.word_of_piece[None, :]).astype(np.int64), "1 between pieces of one word")
    monkeypatch.setitem(RELATION_KINDS, "same_word", kind)
    cfg = load_config(None, ["--model.syntax.relations=[[same_word, none, none, none]]", "--model.d_model=16", "--model.ffn_dim=32", "--model.enc_layers=1"])
    model = build_model(cfg.model, 40, 40).eval()
    assert model.feature_spec.relations == {"same_word"} and not model.feature_spec.needs_parse
    b = make_batch([np.array([7, 8, 9])], [np.array([5, 6])], [0])
    b.features = pad_features([sentence_features(SourceAnnotation(np.array([0, 0, 1]), np.zeros(0, dtype=np.int64)), model.feature_spec)], b.src.size(1))
    assert b.features.relation("same_word")[0].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    out = model(b)
    out.logits.sum().backward()
    assert model.encoder[0].self_attn.extensions[0].key_emb["same_word"].weight.grad.abs().sum() > 0


def test_log_parent_scaling_adds_the_log_gaussian_and_favours_the_parent_for_negative_scores():
    parent = torch.tensor([[2, 2, 2]])
    scores = torch.full((1, 1, 3, 3), -5.0)  # a head whose raw scores are all negative
    mult = ParentScaled([True], sigma=1.0)
    log = ParentScaled([True], sigma=1.0, scaling="log")
    s_mult = mult.scores(scores, None, SourceFeatures(parent=parent))
    s_log = log.scores(scores, None, SourceFeatures(parent=parent))
    gauss = torch.tensor([math.exp(-((j - 2) ** 2) / 2) / math.sqrt(2 * math.pi) for j in range(3)])
    torch.testing.assert_close(s_log[0, 0], (scores[0, 0] + gauss.log()).float())
    # multiplying: the parent (j = 2) gets the *lowest* score; adding the log: the highest
    assert s_mult[0, 0, 0].argmin() == 2 and s_log[0, 0, 0].argmax() == 2
    weights = torch.softmax(s_log[0, 0, 0], -1)
    torch.testing.assert_close(weights, gauss / gauss.sum())  # equal raw scores: the weights are the Gaussian
