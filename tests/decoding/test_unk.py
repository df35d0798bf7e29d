"""Tests for syntaxnmt.decoding.unk: every <unk> of a translation becomes its most attended source word,
copied or translated with a lexical table."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from conftest import untrained_checkpoint
from torch import nn

from syntaxnmt.config import DecodeConfig, ModelConfig, load_config
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.data.subwords import EOS, UNK, Tokenizer
from syntaxnmt.data.words import train_word_vocab
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.decoding.search import Hypothesis
from syntaxnmt.decoding.unk import decode_replacing, forced_attention, locate_unknown_words
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import FeatureSpec

DEVICE = torch.device("cpu")


@dataclass
class _Enc:
    n: int

    def index_select(self, index):
        return _Enc(len(index))


@dataclass
class _State:
    n: int
    step: int = 0


class Toy(nn.Module):
    """Emits ``output`` then EOS. Force-decoding, its cross-attention (two layers, one head) puts
    all the weight of target row t on source position ``focus[layer][t]``."""

    def __init__(self, output: list[int], focus: list[list[int]], vocab: int):
        super().__init__()
        self.output, self.focus, self.vocab = output, focus, vocab
        self.feature_spec = FeatureSpec()
        self.cfg = ModelConfig(max_positions=64)

    def encode(self, batch, need_weights=False):
        return _Enc(len(batch))

    def init_state(self, enc):
        return _State(enc.n)

    def step(self, tokens, state, need_weights=False):
        lp = torch.full((state.n, self.vocab), -30.0)
        lp[:, self.output[state.step] if state.step < len(self.output) else EOS] = 0.0
        state.step += 1
        return lp, state

    def reorder_state(self, state, index, sources_kept=False):
        return _State(len(index), state.step)

    def forward(self, batch, need_weights=False):
        b, t, s = batch.tgt_in.size(0), batch.tgt_in.size(1), batch.src.size(1)
        layers = []
        for focus in self.focus:
            attn = torch.zeros(b, 1, t, s)
            for row in range(t):
                attn[:, 0, row, focus[row] if row < len(focus) else 0] = 1.0
            layers.append(attn)
        return SimpleNamespace(cross_attention=layers)


@pytest.fixture
def toks(tmp_path):
    src = train_word_vocab(["the cat eats grass"] * 3, tmp_path / "src.words", vocab_size=8)
    tgt = train_word_vocab(["die katze frisst gras"] * 3, tmp_path / "tgt.words", vocab_size=8)
    return Tokenizers(Tokenizer(src), Tokenizer(tgt))


def _translate(model, toks, decode: DecodeConfig, line="the zebra eats grass"):
    cfg = load_config(None)
    return translate_lines(model, cfg, toks, [line], decode, DEVICE, beam=1)[0][0][0]


def test_an_unk_gets_the_most_attended_source_word_or_its_translation(toks, tmp_path):
    die, frisst = toks.tgt.encode("die frisst")
    # "die <unk> frisst": the <unk> (row 1) attends to source word 1, "zebra" (itself unknown to the model).
    model = Toy([die, UNK, frisst], focus=[[0, 1, 2]], vocab=len(toks.tgt))
    assert _translate(model, toks, DecodeConfig()) == "die <unk> frisst"
    assert _translate(model, toks, DecodeConfig(unk_replace="copy")) == "die zebra frisst"
    (tmp_path / "lex.tsv").write_text("zebra\tZebra\t0.9\t9\nzebra\tPferd\t0.1\t1\neats\tisst\t1.0\t3\n")
    assert _translate(model, toks, DecodeConfig(unk_replace="dictionary", unk_dictionary=str(tmp_path / "lex.tsv"))) == "die Zebra frisst"
    (tmp_path / "other.tsv").write_text("cat\tKatze\t1.0\t3\n")  # no entry: the word is copied
    assert _translate(model, toks, DecodeConfig(unk_replace="dictionary", unk_dictionary=str(tmp_path / "other.tsv"))) == "die zebra frisst"


def test_the_chosen_layer_decides(toks):
    die = toks.tgt.encode("die")[0]
    model = Toy([die, UNK, UNK], focus=[[0, 3, 1], [0, 2, 3]], vocab=len(toks.tgt))
    assert _translate(model, toks, DecodeConfig(unk_replace="copy", unk_layer=0)) == "die grass zebra"
    assert _translate(model, toks, DecodeConfig(unk_replace="copy", unk_layer=-1)) == "die eats grass"


def test_source_eos_is_never_chosen(toks):
    die = toks.tgt.encode("die")[0]
    model = Toy([die, UNK], focus=[[0, 4]], vocab=len(toks.tgt))  # position 4 is EOS of a 4-word source
    model.forward = lambda batch, need_weights=False: SimpleNamespace(cross_attention=[torch.tensor([[[[0.1, 0.2, 0.05, 0.05, 0.6]] * 3]])])
    assert _translate(model, toks, DecodeConfig(unk_replace="copy")) == "die zebra"


def test_dictionary_mode_needs_a_table():
    with pytest.raises(UserError, match="unk_dictionary"):
        load_config(None, {"decode": {"unk_replace": "dictionary"}})


def test_decode_replacing_detokenizes_after_replacing(tmp_path):
    vocab = train_word_vocab(["a house , a tree ."], tmp_path / "v.words", vocab_size=20)
    tok = Tokenizer(vocab, lang="en", moses=True)
    ids = tok.encode("a house , a tree .")
    ids[1] = UNK
    assert decode_replacing(tok, ids, ["home"]) == "a home, a tree."


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_real_models_read_their_forced_attention(make_config, tmp_path, arch):
    """locate_unknown_words picks, for each <unk>, the argmax of the model's own cross-attention
    over the source words (EOS excluded)."""
    extra = {"model": {"arch": "rnn", "heads": 1, "rnn": {"hidden": 16, "attention_dim": 8}}} if arch == "rnn" else None
    cfg = make_config(extra)
    model, _, _ = load_model(untrained_checkpoint(cfg, tmp_path / "m.pt", 3), DEVICE)
    batch = make_batch([[5, 6, 7, 8, 9], [10, 11]], None, [0, 1])
    hyps = [[Hypothesis([12, UNK, 13, UNK], 0.0, 0.0)], [Hypothesis([UNK], 0.0, 0.0), Hypothesis([14], 0.0, 0.0)]]
    locate_unknown_words(model, batch, hyps, DecodeConfig(unk_replace="copy", unk_layer=-1))
    forced = make_batch([[5, 6, 7, 8, 9], [10, 11]], [[12, UNK, 13, UNK], [UNK]], [0, 1])
    attn = forced_attention(model, forced, -1, None)
    assert hyps[0][0].unk_sources == [int(attn[0, 1, :5].argmax()), int(attn[0, 3, :5].argmax())]
    assert hyps[1][0].unk_sources == [int(attn[1, 0, :2].argmax())]
    assert hyps[1][1].unk_sources is None
