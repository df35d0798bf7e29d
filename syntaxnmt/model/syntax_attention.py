"""Linguistically enriched encoder self-attention, as extensions of :class:`MultiHeadAttention`.

* :class:`RelationAttention` -- relation-aware heads (Shaw et al. 2018, Eq. 3-4):
      e_ij = (x_i W^Q)(x_j W^K + a^K_ij)^T / sqrt(d_z),   z_i = sum_j alpha_ij (x_j W^V + a^V_ij),
  with a^K, a^V learned embeddings of the relation between i and j: linear relative position,
  tree distance, or tree path. The relation terms are computed without an n×n×d tensor:
  q_i·a^K_ij = (q_i E^K^T)[rel_ij] (a matmul, then a gather), and
  sum_j alpha_ij a^V_ij = (sum of alpha_ij per relation r) @ E^V (a scatter-add, then a matmul).
* :class:`LinguisticHeads` -- chosen heads take queries and keys from projections of POS-tag or
  dependency-label embeddings instead of the hidden states; values still come from the hidden states.
* :class:`ParentScaled` -- parent-scaled self-attention (PASCAL, Bugliarello & Okazaki 2020):
  chosen heads multiply their scores S_ij by N(j; p_i, sigma^2), a Gaussian density centred on the
  position p_i of token i's dependency parent.
* :class:`ParentAttention` -- chosen heads attend to the dependency parent only (one-hot after the
  softmax), in evaluation mode: LISA's injection of a given parse at test time (Strubell et al. 2018).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from syntaxnmt.config import SyntaxConfig
from syntaxnmt.inputs import SourceFeatures
from syntaxnmt.model.attention import AttentionExtension
from syntaxnmt.syntax import RELATION_KINDS

TAG_SOURCES = ("upos", "xpos", "deprel")


def layer_row(spec: list[list], layer: int) -> list | None:
    """Row ``layer`` of a per-layer, per-head spec (a single row applies to every layer); the
    shapes are checked when the config is loaded (:class:`~syntaxnmt.config.ModelConfig`)."""
    if not spec:
        return None
    return spec[0] if len(spec) == 1 else spec[layer]


class RelationAttention(AttentionExtension):
    """Relation embeddings on keys and values for the heads of each relation kind."""

    def __init__(self, kinds: list[str], d_head: int, syn: SyntaxConfig):
        super().__init__()
        self.use_values = syn.relation_values
        self.scale = 1.0 / math.sqrt(d_head)
        self.kinds = [k for k in RELATION_KINDS if k in kinds]
        for k in self.kinds:
            self.register_buffer(f"heads_{k}", torch.tensor([h for h, kk in enumerate(kinds) if kk == k]), persistent=False)
        sizes = {k: RELATION_KINDS[k].n_ids(syn) for k in self.kinds}
        # Shared by the heads of one kind within the layer (Shaw et al. 2018, Sec. 3.1).
        self.key_emb = nn.ModuleDict({k: nn.Embedding(sizes[k], d_head) for k in self.kinds})
        self.value_emb = nn.ModuleDict({k: nn.Embedding(sizes[k], d_head) for k in self.kinds}) if self.use_values else None
        for emb in list(self.key_emb.values()) + (list(self.value_emb.values()) if self.value_emb else []):
            nn.init.normal_(emb.weight, std=d_head**-0.5)

    def scores(self, scores: Tensor, q: Tensor, features: SourceFeatures) -> Tensor:
        extra = torch.zeros_like(scores)
        for kind in self.kinds:
            heads = getattr(self, f"heads_{kind}")
            ids = features.relation(kind)  # (B, S, S)
            qe = torch.matmul(q.index_select(1, heads), self.key_emb[kind].weight.t())  # (B, h, Tq, R)
            idx = ids[:, None].expand(qe.size(0), len(heads), -1, -1)
            extra = extra.index_copy(1, heads, qe.gather(-1, idx) * self.scale)
        return scores + extra

    def values(self, out: Tensor, weights: Tensor, features: SourceFeatures) -> Tensor:
        if not self.use_values:
            return out
        extra = torch.zeros_like(out)
        for kind in self.kinds:
            heads = getattr(self, f"heads_{kind}")
            ids = features.relation(kind)
            w = weights.index_select(1, heads)  # (B, h, Tq, Tk)
            idx = ids[:, None].expand(w.size(0), len(heads), -1, -1)
            n_rel = self.value_emb[kind].num_embeddings
            per_relation = w.new_zeros(*w.shape[:-1], n_rel).scatter_add_(-1, idx, w)  # (B, h, Tq, R)
            extra = extra.index_copy(1, heads, torch.matmul(per_relation, self.value_emb[kind].weight))
        return out + extra


class LinguisticHeads(AttentionExtension):
    """Heads whose queries and keys are projections of tag embeddings (``upos``, ``xpos``, ``deprel``)."""

    def __init__(self, sources: list[str], d_head: int, tag_dim: int, tag_sizes: dict[str, int]):
        super().__init__()
        self.assign = {h: s for h, s in enumerate(sources) if s != "word"}
        for s in self.assign.values():
            if s not in tag_sizes:
                raise ValueError(f"model.syntax.qk_source uses {s!r} but the prepared corpus has no {s} tags")
        used = sorted(set(self.assign.values()))
        self.tag_emb = nn.ModuleDict({s: nn.Embedding(tag_sizes[s], tag_dim, padding_idx=0) for s in used})
        self.q_proj = nn.ModuleDict({str(h): nn.Linear(tag_dim, d_head) for h in self.assign})
        self.k_proj = nn.ModuleDict({str(h): nn.Linear(tag_dim, d_head) for h in self.assign})

    def queries_keys(self, q: Tensor, k: Tensor, features: SourceFeatures) -> tuple[Tensor, Tensor]:
        qs, ks = list(q.unbind(1)), list(k.unbind(1))
        embedded = {}
        for h, source in self.assign.items():
            if source not in embedded:
                embedded[source] = self.tag_emb[source](features.tag(source))  # (B, S, tag_dim)
            qs[h] = self.q_proj[str(h)](embedded[source])
            ks[h] = self.k_proj[str(h)](embedded[source])
        return torch.stack(qs, 1), torch.stack(ks, 1)


class ParentScaled(AttentionExtension):
    """PASCAL: S'_ij = S_ij * N(j; p_i, sigma^2) for the chosen heads (Bugliarello & Okazaki 2020,
    ``scaling="multiply"``), or S'_ij = S_ij + log N(j; p_i, sigma^2) (``"log"``)."""

    def __init__(self, flags: list[bool], sigma: float, scaling: str = "multiply"):
        super().__init__()
        on = [h for h, v in enumerate(flags) if v]
        self.register_buffer("heads", torch.tensor(on, dtype=torch.long), persistent=False)
        self.sigma, self.scaling = sigma, scaling

    def scores(self, scores: Tensor, q: Tensor, features: SourceFeatures) -> Tensor:
        parent = features.parents().to(scores.dtype)  # (B, S)
        j = torch.arange(scores.size(-1), device=scores.device, dtype=scores.dtype)
        log_gauss = -((j[None, None, :] - parent[:, :, None]) ** 2) / (2 * self.sigma**2) - 0.5 * math.log(2 * math.pi * self.sigma**2)
        picked = scores.index_select(1, self.heads)
        scaled = picked * log_gauss.exp()[:, None] if self.scaling == "multiply" else picked + log_gauss[:, None]
        return scores.index_copy(1, self.heads, scaled)


class ParentAttention(AttentionExtension):
    """The chosen heads' scores become 0 at token i's parent p_i and the dtype's minimum elsewhere,
    so their attention is the one-hot parent (a root, and EOS, attend to themselves). Only in
    evaluation mode: in training the heads learn that distribution (the LISA loss of
    :mod:`syntaxnmt.training.multitask`). A padding row keeps a uniform row over the real keys (no NaN)."""

    def __init__(self, heads: list[int]):
        super().__init__()
        self.register_buffer("heads", torch.tensor(heads, dtype=torch.long), persistent=False)

    def scores(self, scores: Tensor, q: Tensor, features: SourceFeatures) -> Tensor:
        if self.training:
            return scores
        parent = features.parents()  # (B, S)
        j = torch.arange(scores.size(-1), device=scores.device)
        at_parent = j[None, None, :].eq(parent[:, :, None])  # (B, Tq, Tk)
        one_hot = torch.where(at_parent, scores.new_zeros(()), scores.new_full((), torch.finfo(scores.dtype).min))
        picked = one_hot[:, None].expand(-1, len(self.heads), -1, -1).contiguous()
        return scores.index_copy(1, self.heads, picked)


def encoder_extensions(syn: SyntaxConfig, layer: int, heads: int, d_head: int, tag_sizes: dict[str, int]) -> list[AttentionExtension]:
    """The extensions of encoder self-attention layer ``layer`` configured in ``model.syntax``."""
    exts: list[AttentionExtension] = []
    sources = layer_row(syn.qk_source, layer)
    if sources and any(s != "word" for s in sources):
        exts.append(LinguisticHeads(sources, d_head, syn.tag_dim, tag_sizes))
    kinds = layer_row(syn.relations, layer)
    if kinds and any(k != "none" for k in kinds):
        exts.append(RelationAttention(kinds, d_head, syn))
    flags = layer_row(syn.parent_scaled, layer)
    if flags and any(flags):
        exts.append(ParentScaled(flags, syn.parent_sigma, syn.parent_scaling))
    return exts


class InputFeatures(nn.Module):
    """Linguistic input features (Sennrich & Haddow 2016, Eq. 3): each feature is embedded and
    the embeddings are added to, or concatenated with, the word embedding."""

    def __init__(self, syn: SyntaxConfig, d_model: int, sizes: dict[str, int]):
        super().__init__()
        self.names = list(syn.input_features)
        self.concat = syn.feature_combine == "concat"
        dim = syn.feature_dim if self.concat else d_model
        if self.concat and dim * len(self.names) >= d_model:
            raise ValueError(f"model.syntax.feature_dim {dim} x {len(self.names)} features leaves no room in d_model {d_model}")
        for n in self.names:
            if n not in sizes:
                raise ValueError(f"model.syntax.input_features uses {n!r} but the prepared corpus has no {n} tags")
        self.emb = nn.ModuleDict({n: nn.Embedding(sizes[n], dim, padding_idx=0) for n in self.names})
        for e in self.emb.values():
            nn.init.normal_(e.weight, std=d_model**-0.5)

    @property
    def word_dim_reduction(self) -> int:
        return len(self.names) * self.emb[self.names[0]].embedding_dim if self.concat and self.names else 0

    def forward(self, word_emb: Tensor, features: SourceFeatures) -> Tensor:
        embs = [self.emb[n](features.tag(n)) for n in self.names]
        if self.concat:
            return torch.cat([word_emb, *embs], dim=-1)
        return word_emb + sum(embs)
