"""Auxiliary modules on the encoder that a model's checkpoint holds beside the translation model:
the fertility predictor of coverage training and the classifiers of multi-task learning. Their
losses live with the training objectives (:mod:`syntaxnmt.training.alignment`,
:mod:`syntaxnmt.training.multitask`); :func:`syntaxnmt.model.build_model` attaches them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Fertility(nn.Module):
    """Predicted fertility of every source word (Tu et al. 2016, "Modeling Coverage for Neural
    Machine Translation", ACL; Cohn et al. 2016)::

        f_j = N · σ(w^T h_j + b)

    ``h_j`` (B, S, d_model) are encoder states, N = ``max_fertility``. The bias starts at
    logit(1/N), so that every fertility starts near 1 (plain coverage). Padding gets 0.
    """

    def __init__(self, d_model: int, max_fertility: float = 2.0):
        super().__init__()
        if max_fertility <= 0:
            raise ValueError("max_fertility must be positive")
        self.max_fertility = float(max_fertility)
        self.proj = nn.Linear(d_model, 1)
        nn.init.normal_(self.proj.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.proj.bias.fill_(-math.log(max_fertility - 1.0) if max_fertility > 1.0 else 0.0)

    def forward(self, encoder_hidden: Tensor, src_pad_mask: Tensor | None = None) -> Tensor:
        """Fertilities (B, S) from encoder states (B, S, d_model)."""
        f = self.max_fertility * torch.sigmoid(self.proj(encoder_hidden).squeeze(-1))
        if src_pad_mask is not None:
            f = f.masked_fill(src_pad_mask, 0.0)
        return f


class Tagger(nn.Module):
    """A linear classifier of encoder states (after a LayerNorm: the states of a pre-norm encoder's
    inner layers are not normalized)."""

    def __init__(self, d_model: int, n_tags: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, n_tags)

    def forward(self, states: Tensor) -> Tensor:
        """Tag logits (B, S, n_tags) of states (B, S, d_model)."""
        return self.proj(self.norm(states))


def _mlp(d_in: int, d_out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_out), nn.LeakyReLU(0.1), nn.Dropout(dropout))


class BiaffineParser(nn.Module):
    """Biaffine arc and label scorer (Dozat & Manning 2017); the biaffine weights start at zero."""

    def __init__(self, d_model: int, arc_dim: int, label_dim: int, n_labels: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.arc_dep, self.arc_head = _mlp(d_model, arc_dim, dropout), _mlp(d_model, arc_dim, dropout)
        self.label_dep, self.label_head = _mlp(d_model, label_dim, dropout), _mlp(d_model, label_dim, dropout)
        self.arc_U = nn.Parameter(torch.zeros(arc_dim, arc_dim))
        self.arc_u = nn.Parameter(torch.zeros(arc_dim))
        self.label_U = nn.Parameter(torch.zeros(n_labels, label_dim, label_dim))
        self.label_W = nn.Linear(2 * label_dim, n_labels)

    def arc_scores(self, r: Tensor) -> Tensor:
        """s (B, S, S) from normalized states r (B, S, d): s[b, i, j] = h^dep_i U h^head_j + h^head_j · u."""
        dep, head = self.arc_dep(r), self.arc_head(r)
        return torch.matmul(dep @ self.arc_U, head.transpose(1, 2)) + (head @ self.arc_u)[:, None, :]

    def label_scores(self, r: Tensor, heads: Tensor) -> Tensor:
        """Label scores (B, S, n_labels) of each token given its head position ``heads`` (B, S)."""
        dep, head = self.label_dep(r), self.label_head(r)
        head = head.gather(1, heads[..., None].expand(-1, -1, head.size(-1)))  # h'^head_{p_i}
        # dep_i^T U_l head_i for every label l: one product (dep times every U_l, through
        # one matrix), then a dot product with head; einsum took 1.3x as long on CPU
        n_labels, d = self.label_U.shape[:2]
        dep_u = F.linear(dep, self.label_U.transpose(1, 2).reshape(n_labels * d, d)).view(*dep.shape[:-1], n_labels, d)
        return (dep_u * head[..., None, :]).sum(-1) + self.label_W(torch.cat([dep, head], dim=-1))
