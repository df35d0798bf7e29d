"""Export a trained Transformer to CTranslate2 (https://github.com/OpenNMT/CTranslate2).

``syntaxnmt export-ct2 --checkpoint C -o DIR`` maps the weights of
:class:`~syntaxnmt.model.transformer.Transformer` onto ``ctranslate2.specs.TransformerSpec``
(pre- or post-norm, ReLU or GELU, sinusoidal / learned / no absolute positions, any tying of the
embeddings) and writes a CTranslate2 model directory, with the tokenizers (SentencePiece models
or word vocabularies) and the training config next to it so that ``syntaxnmt translate --engine ctranslate2 --checkpoint DIR``
runs the same text pipeline as the PyTorch engine (:mod:`syntaxnmt.decoding.ct2_engine`).

Relative positions (Shaw et al. 2018, Eq. 3-4): CTranslate2's ``relative_position`` attention
adds ``q_i·a^K_{clip(j-i)}`` to the energies and ``Σ_j α_ij a^V_{clip(j-i)}`` to the outputs, with
one (2k+1)×d_head table per layer shared by all heads, and then drops the absolute positions of
that stack. That is exactly a model whose every encoder head of every layer has ``linear``
relations and whose ``model.positions`` is ``none``; any other mix is refused. Structure that
CTranslate2 cannot represent (tree relations, linguistic or parent-scaled heads, injected
parses, input features, sparse or hard cross-attention, RNNs) is refused with one line naming it. Training-only modules
(multi-task classifiers, the fertility predictor) do not take part in translation and are left out.

Alignment (:func:`ct2_alignment`): CTranslate2's ``return_attention`` gives the cross-attention of
the decoder's ``alignment_layer``, averaged over its first ``alignment_heads`` heads (0: all).
The export names the reading the model aligns with (``train.alignment.layer``/``head``, its
guided head): that layer, and one head or all of them; a single head ``h`` other than 0 is made
head 0 by permuting that layer's cross-attention heads (the rows of the query, key and value
projections and the columns of the output projection, head by head: the layer computes the
same function). The reading is recorded in ``syntaxnmt.json`` (``"alignment"``), with the reason
where CTranslate2 cannot return it (every layer averaged, a full-context pass).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from syntaxnmt.config import Config
from syntaxnmt.data.prepare import Tokenizers
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, UNK
from syntaxnmt.model.outputs import layer_head
from syntaxnmt.textio import atomic_write_text, foreign_entries, listing, marker_info, refuse_protected_folder, remove_stale_temporaries, temporary_prefix, write_marker

QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")
CONFIG_FILE = "syntaxnmt.json"  # the training config, beside CTranslate2's own config.json
SOURCE_TOKENIZER, TARGET_TOKENIZER = "source.tokenizer", "target.tokenizer"  # SentencePiece models (or word vocabularies)
MARKER, WRITTEN_BY = ".syntaxnmt-export", "syntaxnmt export-ct2"  # the file saying a folder is an export (what --force may replace)
EXPORT_FILES = ("model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json", "target_vocabulary.json", SOURCE_TOKENIZER, TARGET_TOKENIZER, CONFIG_FILE)
"""What an export holds, for an export whose marker predates its list of ``entries``."""
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default (CTranslate2's is 1e-6)


def unsupported(model: nn.Module, cfg: Config) -> str | None:
    """Why CTranslate2 cannot represent ``model`` (None when it can)."""
    if cfg.model.arch != "transformer":
        return f"model.arch {cfg.model.arch} (CTranslate2 runs Transformers only)"
    if cfg.model.context.documents:  # HAN's blocks, or the <sep>-joined documents of concatenation
        return f"a document-context model (model.context.kind: {cfg.model.context.kind}; CTranslate2 translates sentences alone)"
    if cfg.model.attention_normalizer != "softmax":
        return f"model.attention_normalizer {cfg.model.attention_normalizer} (CTranslate2's attention is softmax)"
    if cfg.model.hard_attention != "none":
        return f"model.hard_attention {cfg.model.hard_attention} (one-hot cross-attention)"
    a = cfg.train.alignment
    if a.leaky and not a.full_context:
        return "a leak slot in the cross-attention (train.alignment.leaky without full_context)"
    syn = cfg.model.syntax
    kinds = {k for row in syn.relations for k in row if k != "none"}
    tree = sorted(kinds - {"linear"})
    if tree:
        return f"tree relations (model.syntax.relations: {', '.join(tree)})"
    if any(s != "word" for row in syn.qk_source for s in row):
        return "linguistic heads (model.syntax.qk_source)"
    if any(v for row in syn.parent_scaled for v in row):
        return "parent-scaled heads (model.syntax.parent_scaled)"
    if syn.input_features:
        return f"input features (model.syntax.input_features: {', '.join(syn.input_features)})"
    if kinds and not shaw_everywhere(cfg):
        return "relative positions on some heads or layers only (CTranslate2 gives every encoder head of every layer the same table)"
    if kinds and cfg.model.positions != "none":
        return f"relative positions together with absolute positions (model.positions: {cfg.model.positions}; CTranslate2 drops the absolute ones)"
    allowed = {"RelationAttention"} if kinds else set()
    for i, layer in enumerate(model.encoder):
        others = [type(e).__name__ for e in layer.self_attn.extensions if type(e).__name__ not in allowed]
        if others:
            return f"attention extensions in encoder layer {i} ({', '.join(others)}, e.g. from train.multitask.lisa.inject_parse)"
    return None


def shaw_everywhere(cfg: Config) -> bool:
    """Whether every head of every encoder layer has ``linear`` relations."""
    rows = cfg.model.syntax.relations
    return bool(rows) and all(k == "linear" for row in rows for k in row)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, layer: nn.Linear, rows: np.ndarray | None = None, columns: np.ndarray | None = None) -> None:
    """``layer``'s weights, its output features in the order ``rows`` (its input features in the
    order ``columns``; None: as they are)."""
    weight = _np(layer.weight)
    spec.weight = (weight if rows is None else weight[rows]) if columns is None else weight[:, columns]
    if layer.bias is not None:
        spec.bias = _np(layer.bias) if rows is None else _np(layer.bias)[rows]


def _fused(spec, layers: list[nn.Linear], rows: np.ndarray | None = None) -> None:
    """One CTranslate2 linear for several projections stacked on the output dimension (QKV or
    KV), each projection's output features in the order ``rows``."""
    pick = (lambda a: a) if rows is None else (lambda a: a[rows])  # noqa: E731
    spec.weight = np.concatenate([pick(_np(x.weight)) for x in layers])
    if layers[0].bias is not None:
        spec.bias = np.concatenate([pick(_np(x.bias)) for x in layers])


def _norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def head_order(heads: int, d_head: int, first: int) -> np.ndarray:
    """The feature order of ``heads`` heads of ``d_head`` features with head ``first`` moved to
    the front (the others in order): applied to the query, key and value projections' outputs and
    the output projection's inputs, the attention layer computes the same function, and its head
    0 is the former head ``first``."""
    order = [first] + [h for h in range(heads) if h != first]
    return np.concatenate([np.arange(h * d_head, (h + 1) * d_head) for h in order])


def _attention(spec, attn, self_attention: bool, norm: nn.LayerNorm, heads: np.ndarray | None = None) -> None:
    """One attention layer's weights; ``heads``: its features reordered (:func:`head_order`)."""
    if self_attention:
        _fused(spec.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
    else:
        _linear(spec.linear[0], attn.q_proj, heads)
        _fused(spec.linear[1], [attn.k_proj, attn.v_proj], heads)
    _linear(spec.linear[-1], attn.out_proj, columns=heads)
    _norm(spec.layer_norm, norm)
    if hasattr(spec, "relative_position_keys"):
        (rel,) = attn.extensions
        keys = rel.key_emb["linear"].weight
        spec.relative_position_keys = _np(keys)
        spec.relative_position_values = _np(rel.value_emb["linear"].weight) if rel.value_emb is not None else np.zeros(tuple(keys.shape), np.float32)


def _ffn(spec, ffn, norm: nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.fc1)
    _linear(spec.linear_1, ffn.fc2)
    _norm(spec.layer_norm, norm)


def _positions(spec, embed, cfg: Config) -> None:
    """Absolute positions as an explicit table: ours interleave sin/cos, CTranslate2's built-in one does not."""
    if not hasattr(spec, "position_encodings"):
        return
    if cfg.model.positions == "learned":
        spec.position_encodings.encodings = _np(embed.positions.weight)
    elif cfg.model.positions == "sinusoidal":
        spec.position_encodings.encodings = _np(embed.table)
    else:
        spec.position_encodings.encodings = np.zeros((cfg.model.max_positions, cfg.model.d_model), np.float32)


def ct2_alignment(cfg: Config) -> dict:
    """The attention reading CTranslate2 returns as alignment for this model: the one it was
    trained (``train.alignment.guided_weight``) or configured to align with
    (``train.alignment.layer``/``head``, as :func:`syntaxnmt.alignment.extract.configured_reading`
    reads it), as ``{"layer": L, "head": h | None, "label": ...}`` (0-based; head None: the
    layer's heads averaged), or ``{"unsupported": why}`` where CTranslate2 cannot return it: every
    layer averaged (``layer: average``; CTranslate2 returns one layer) or the full-context pass
    (``full_context``: a pass CTranslate2 does not run)."""
    a, m = cfg.train.alignment, cfg.model
    if a.full_context:
        return {"unsupported": f"its alignment is read from the full-context pass of layer {a.layer} (train.alignment.full_context), which CTranslate2 does not run"}
    layer, head = layer_head(a.layer), layer_head(a.head)
    if layer is None:
        return {"unsupported": "its alignment reading averages every decoder layer (train.alignment.layer: average) and CTranslate2 returns one layer's attention; train or configure one layer (train.alignment.layer)"}
    layer, head = layer % m.dec_layers, None if head is None else head % m.heads
    return {"layer": layer, "head": head, "label": f"layer {layer}, " + ("heads averaged" if head is None else f"head {head}")}


def build_spec(model: nn.Module, cfg: Config, toks: Tokenizers):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model`` with its weights and vocabularies."""
    from ctranslate2.specs import common_spec, transformer_spec  # deferred: CTranslate2 loads only for export-ct2 / --engine ctranslate2

    why = unsupported(model, cfg)
    if why is not None:
        raise UserError(f"CTranslate2 cannot represent {why}")
    m = cfg.model
    pre = m.norm == "pre"
    activation = common_spec.Activation.RELU if m.activation == "relu" else common_spec.Activation.GELU
    encoder = transformer_spec.TransformerEncoderSpec(m.enc_layers, m.heads, pre_norm=pre, activation=activation, relative_position=shaw_everywhere(cfg))
    align = ct2_alignment(cfg)
    where = {} if "unsupported" in align else {"alignment_layer": align["layer"], "alignment_heads": 0 if align["head"] is None else 1}
    decoder = transformer_spec.TransformerDecoderSpec(m.dec_layers, m.heads, pre_norm=pre, activation=activation, **where)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.add_source_eos = True  # our sources end with EOS (syntaxnmt.data.batches.make_batch)
    spec.config.decoder_start_token = spec.config.bos_token = toks.tgt.id_to_piece(BOS)
    spec.config.eos_token, spec.config.unk_token = toks.tgt.id_to_piece(EOS), toks.tgt.id_to_piece(UNK)

    encoder.embeddings[0].weight = _np(model.src_embed.tokens.weight)
    _positions(encoder, model.src_embed, cfg)
    if pre:
        _norm(encoder.layer_norm, model.enc_norm)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        _attention(layer_spec.self_attention, layer.self_attn, True, layer.res_attn.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)

    decoder.embeddings.weight = _np(model.tgt_embed.tokens.weight)
    _positions(decoder, model.tgt_embed, cfg)
    if pre:
        _norm(decoder.layer_norm, model.dec_norm)
    for k, (layer_spec, layer) in enumerate(zip(decoder.layer, model.decoder)):
        _attention(layer_spec.self_attention, layer.self_attn, True, layer.res_self.norm)
        heads = head_order(layer.cross_attn.heads, layer.cross_attn.d_head, align["head"]) if align.get("layer") == k and align["head"] else None  # the aligning head becomes head 0
        _attention(layer_spec.attention, layer.cross_attn, False, layer.res_cross.norm, heads)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
    decoder.projection.weight = _np(model.output.weight)

    spec.register_source_vocabulary([toks.src.id_to_piece(i) for i in range(len(toks.src))])
    spec.register_target_vocabulary([toks.tgt.id_to_piece(i) for i in range(len(toks.tgt))])
    return spec


def write_export(model: nn.Module, cfg: Config, toks: Tokenizers, out: Path, quantization: str = "float32") -> None:
    """Write the CTranslate2 model, the tokenizers and ``syntaxnmt.json`` to ``out`` (a new folder)."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization {quantization}: choose from {', '.join(QUANTIZATIONS)}")
    spec = build_spec(model, cfg, toks)
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(out))
    (out / SOURCE_TOKENIZER).write_bytes(toks.src.model_proto())
    (out / TARGET_TOKENIZER).write_bytes(toks.tgt.model_proto())
    atomic_write_text(out / CONFIG_FILE, json.dumps({"config": cfg.model_dump(mode="json"), "quantization": quantization, "alignment": ct2_alignment(cfg)}, indent=2) + "\n")


def export_ct2(checkpoint: str | Path, out: str | Path, quantization: str = "float32", force: bool = False) -> Path:
    """Export ``checkpoint`` to the folder ``out``, built in a temporary folder and renamed into place.

    ``out`` may be new or empty; with ``force`` it may also be an earlier export (a folder holding
    :data:`MARKER`, which every export writes). Anything else is refused before the model is
    loaded: the current directory or a parent of it, a folder holding ``checkpoint``, a
    non-empty folder this command did not write -- ``--force`` never deletes what it did not write.
    """
    out = Path(out)
    if out.exists() or out.is_symlink():
        refuse_protected_folder(out, keep=[checkpoint])
        if not out.is_dir():
            raise UserError(f"{out}: exists and is not a folder (give a new folder)")
        if any(out.iterdir()):
            if not force:
                raise UserError(f"{out}: exists and is not an empty folder (give a new one, or --force to replace an export)")
            info = marker_info(out, MARKER, WRITTEN_BY)
            if info is None:
                raise UserError(f"{out}: not written by `syntaxnmt export-ct2` (no {MARKER} in it); --force replaces only an earlier export: remove it yourself or give a new folder")
            foreign = foreign_entries(out, dict.fromkeys(info.get("entries") or EXPORT_FILES), MARKER)
            if foreign:
                raise UserError(f"{out}: holds what `syntaxnmt export-ct2` did not write ({listing(foreign)}); --force replaces only an export holding nothing else: move them out or give a new folder")
    model, cfg, toks = load_model(checkpoint, torch.device("cpu"))
    given, out = out, out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out.parent, out.name)  # left by an export that was killed
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=temporary_prefix(out), suffix=".tmp"))
    old = None
    try:
        try:
            write_export(model, cfg, toks, tmp, quantization)
            write_marker(tmp, MARKER, WRITTEN_BY, checkpoint=str(Path(checkpoint).absolute()), quantization=quantization, entries=sorted(p.name for p in tmp.iterdir()))
        except OSError as e:  # a full disk: name the folder asked for, not the temporary one the export is built in
            raise UserError(f"{given}: cannot write the export ({e.strerror or type(e).__name__})") from None
        if out.exists() and any(out.iterdir()):  # an earlier export (checked above): moved aside, removed once replaced
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=temporary_prefix(out), suffix=".tmp"))
            out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            if old is not None:
                old.rename(out)
                old = None
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return given
