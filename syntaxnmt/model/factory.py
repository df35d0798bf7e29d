"""The one model factory: everything a checkpoint holds, built from its config.

:func:`build_model` is called by training (``train``, ``train-joint``), translation, alignment,
attention export, CTranslate2 export and the server, so a checkpoint always loads into the model
that wrote it: the encoder-decoder of ``model.arch`` (:class:`~syntaxnmt.model.transformer.Transformer`
or :class:`~syntaxnmt.model.rnn.RNNModel`) plus the modules its training attaches -- the fertility
predictor of ``train.alignment.fertility``, the classifiers of ``train.multitask``
(:mod:`syntaxnmt.model.heads`) and the supervised alignment attention of
``train.alignment.full_context``/``leaky``.
"""

from __future__ import annotations

import re

from torch import nn

from syntaxnmt.config import Config, ModelConfig
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import FeatureSpec
from syntaxnmt.model.attention import LeakSlot
from syntaxnmt.model.heads import BiaffineParser, Fertility, Tagger
from syntaxnmt.model.rnn import RNNModel
from syntaxnmt.model.rnn_scores import Attention as RNNAttention
from syntaxnmt.model.syntax_attention import ParentAttention
from syntaxnmt.model.transformer import AlignmentPass, DecoderLayer, Transformer


def build_model(cfg: Config | ModelConfig, src_vocab: int, tgt_vocab: int, **tag_sizes: int) -> nn.Module:
    """The model of ``cfg``: with a whole :class:`~syntaxnmt.config.Config`, the encoder-decoder of
    ``model.arch`` and the modules its training attaches (as its checkpoints hold them); with a
    :class:`~syntaxnmt.config.ModelConfig` alone, the encoder-decoder only. ``tag_sizes`` are the
    sizes of the tag sets the model may embed or predict (``upos``, ``xpos``, ``deprel``, ``bie``)."""
    model_cfg = cfg.model if isinstance(cfg, Config) else cfg
    try:
        if model_cfg.arch == "transformer":
            model = Transformer(model_cfg, src_vocab, tgt_vocab, **tag_sizes)
        elif model_cfg.arch == "rnn":
            model = RNNModel(model_cfg, src_vocab, tgt_vocab)
        else:
            raise ValueError(f"unknown architecture {model_cfg.arch}")
        if isinstance(cfg, Config):
            attach_multitask(attach_alignment_pass(attach_fertility(model, cfg), cfg), cfg, tag_sizes)
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, RuntimeError) and not _ALLOCATION_FAILED.search(str(e)):
            raise
        raise UserError(f"the model of this config cannot be allocated ({_allocation_reason(e)}): {_sizes(model_cfg, src_vocab, tgt_vocab)}; reduce them") from None
    return model


def attach_alignment_pass(model: nn.Module, cfg: Config) -> nn.Module:
    """Set ``model.alignment_pass`` (:class:`~syntaxnmt.model.transformer.AlignmentPass`) for
    ``train.alignment.full_context``/``leaky``, and give the supervised layer's cross-attention a
    :class:`~syntaxnmt.model.attention.LeakSlot` (on the supervised head, or on every head of the
    layer with ``head: average``). A negative ``layer`` counts the decoder blocks from the end."""
    a = cfg.train.alignment
    if not a.alignment_pass or model.alignment_pass is not None:
        return model
    layer = int(a.layer) % len(model.decoder)
    model.alignment_pass = AlignmentPass(layer, a.full_context, a.leaky)
    if a.leaky:
        attn = model.decoder[layer].cross_attn
        attn.leak = LeakSlot(attn.heads, attn.d_head, None if a.head == "average" else int(a.head))
    return model


_ALLOCATION_FAILED = re.compile(r"can't allocate memory|not enough memory|out of memory|tried to allocate", re.IGNORECASE)


def _allocation_reason(e: BaseException) -> str:
    """What could not be allocated, from PyTorch's message (``... tried to allocate N bytes``)."""
    m = re.search(r"tried to allocate (\d+) bytes", str(e))
    return f"one tensor needs {int(m.group(1)) / 2**30:,.1f} GiB" if m else type(e).__name__


def _sizes(m: ModelConfig, src_vocab: int, tgt_vocab: int) -> str:
    """The config keys that set the size of a model's tensors, with their values (for messages)."""
    keys = ("d_model", "ffn_dim", "enc_layers", "dec_layers") if m.arch == "transformer" else ("d_model", "rnn.hidden", "rnn.embed_dim", "rnn.attention_dim", "rnn.enc_layers", "rnn.dec_layers")
    values = [(k, getattr(m.rnn, k[4:]) if k.startswith("rnn.") else getattr(m, k)) for k in keys]
    return ", ".join(f"model.{k} {v}" for k, v in values) + f", vocabularies of {src_vocab} and {tgt_vocab} (data.vocab_size)"


def attach_fertility(model: nn.Module, cfg: Config) -> nn.Module:
    """Add ``model.fertility`` (a :class:`Fertility` on the encoder states) when ``train.alignment.fertility`` is on."""
    a = cfg.train.alignment
    if a.fertility and not hasattr(model, "fertility"):
        dim = cfg.model.d_model if cfg.model.arch == "transformer" else 2 * cfg.model.rnn.hidden
        model.fertility = Fertility(dim, a.max_fertility)
    return model


def attach_multitask(model: nn.Module, cfg: Config, tag_sizes: dict[str, int]) -> nn.Module:
    """Add ``model.multitask`` (the classifiers of ``train.multitask``) and, with
    ``lisa.inject_parse``, a :class:`~syntaxnmt.model.syntax_attention.ParentAttention` on the
    supervised heads (the model then needs parent positions at translation time)."""
    mt = cfg.train.multitask
    if not mt.enabled or hasattr(model, "multitask"):
        return model
    tasks, d = mt.tasks(), cfg.model.d_model

    def size(name: str) -> int:
        if name not in tag_sizes:
            raise UserError(f"train.multitask needs {name} tags but the prepared corpus {cfg.prepared_dir} has none: set data.annotate")
        return tag_sizes[name]

    modules: dict[str, nn.Module] = {}
    if "pos" in tasks:
        modules["pos"] = Tagger(d, size(mt.pos.tags))
    if "deprel" in tasks:
        modules["deprel"] = Tagger(d, size("deprel"))
    if "parse" in tasks:
        modules["parse"] = BiaffineParser(d, mt.parse.arc_dim, mt.parse.label_dim, size("deprel"), cfg.model.dropout)
    model.multitask = nn.ModuleDict(modules)
    if "lisa" in tasks and mt.lisa.inject_parse:
        for layer in mt.lisa.layers:
            model.encoder[layer].self_attn.extensions.append(ParentAttention(mt.lisa.heads))
        model.feature_spec = model.feature_spec.union(FeatureSpec(parent=True))
    return model


def set_hard_attention(model: nn.Module, mode: str) -> nn.Module:
    """Switch a built model's one-hot cross-attention (``model.hard_attention``) after loading:
    ``decode`` hardens the cross-attention of every Transformer decoder layer (the RNN decoder's
    attention) in evaluation mode, ``none`` keeps it soft. A decode-time choice: the weights do
    not depend on it (``train`` also changes training, so a loaded model takes it only as
    trained). Every sub-model is switched (the members of an ensemble); ``cfg.hard_attention`` follows."""
    if mode not in ("none", "decode", "train"):
        raise ValueError(f"unknown hard_attention mode {mode!r}")
    for m in model.modules():
        if isinstance(getattr(m, "cfg", None), ModelConfig):
            m.cfg = m.cfg.model_copy(update={"hard_attention": mode})
        if isinstance(m, DecoderLayer):
            m.cross_attn.hard = mode
        elif isinstance(m, RNNAttention):
            m.hard = mode
    return model
