"""Multi-task learning: auxiliary encoder objectives learned from source parses (``train.multitask``).

The parses are a training signal only. Each objective reads one encoder layer -- its output
states, or the self-attention weights of some of its heads -- and adds a term to the loss; the
translation model itself is unchanged, so a multi-task model translates raw text with no parse
and no parser (unless ``lisa.inject_parse``).

* **Tagging** (``pos``, ``deprel``): a linear classifier (after a LayerNorm) on layer l's states;
  every subword piece predicts its word's tag:  L = -Σ_i log softmax(W LN(h_i) + b)[t_i].
* **LISA** -- syntactically supervised self-attention (Strubell et al. 2018, "Linguistically-Informed
  Self-Attention for Semantic Role Labeling", EMNLP, Sec. 2.2): the attention A_h of each chosen head
  h of layer l is trained towards the dependency parent p_i of every token i:
  L = -Σ_h Σ_i log A_h[i, p_i].
* **Biaffine parsing** (Dozat & Manning 2017, "Deep Biaffine Attention for Neural Dependency
  Parsing", ICLR, Sec. 2.2): MLPs of layer l's states give dependent and head representations;
      s_ij = h^dep_i U h^head_j + h^head_j · u                         (score of j as the head of i)
      s_i,l = h'^dep_i U_l h'^head_{p_i} + W_l [h'^dep_i ; h'^head_{p_i}] + b_l   (label l, gold head)
  L = -Σ_i log softmax_j(s_ij)[p_i] - Σ_i log softmax_l(s_i,l)[r_i].

Targets come from :class:`~syntaxnmt.inputs.SourceFeatures`: tags (B, S) and ``parent``
(B, S), the position of the first piece of the parent word -- a piece of a word attends to its
parent word's first piece. A root has no parent: **the root attends to itself** (its target is its
own position). i runs over real pieces: EOS and padding rows are left out of every term, and they
are no candidate heads of the parser. Each term is summed over the batch; the update divides the
total loss by its target tokens (as for ``train.alignment``), so a weight is per source token up to
the length ratio of the corpus.

The classifiers live on the model (``model.multitask``, :func:`attach_multitask`): they are trained,
checkpointed and resumed with it, and unused by translation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from syntaxnmt.config import Config, MultitaskConfig
from syntaxnmt.inputs import EOS, PAD, FeatureSpec
from syntaxnmt.model.heads import BiaffineParser
from syntaxnmt.training.losses import AuxiliaryObjective, decay


def token_mask(src: Tensor) -> Tensor:
    """(B, S) True at the real pieces of a source batch (not EOS, not padding)."""
    return src.ne(PAD) & src.ne(EOS)


# --------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------


IGNORE = -100  # the target of a position left out of a cross-entropy


def tagging_loss(logits: Tensor, tags: Tensor, keep: Tensor) -> Tensor:
    """Summed cross-entropy -Σ_i log softmax(logits_i)[tags_i] over the positions ``keep``.

    ``logits`` (B, S, n_tags), ``tags`` and ``keep`` (B, S). Masked, not indexed: every tensor keeps
    the batch's shape and nothing waits for the device (CUDA graphs)."""
    return F.cross_entropy(logits.float().flatten(0, 1), tags.masked_fill(~keep, IGNORE).flatten(), ignore_index=IGNORE, reduction="sum")


def lisa_loss(weights: Tensor, parent: Tensor, keep: Tensor, eps: float = 1e-9) -> Tensor:
    """LISA: -Σ_h Σ_i log A_h[i, parent_i], summed over heads h and the query positions ``keep``.

    ``weights`` (B, h, S, S): the attention of the supervised heads (rows: queries, softmax over
    keys); ``parent`` (B, S) the target key of each query. A is clamped to ``eps`` inside the log.
    Through the softmax, the gradient with respect to the scores of row i is A_h[i] - onehot(p_i):
    it vanishes when the attention is the one-hot parent.
    """
    at_parent = weights.gather(-1, parent[:, None, :, None].expand(-1, weights.size(1), -1, 1)).squeeze(-1)  # (B, h, S)
    nll = -torch.log(at_parent.float().clamp_min(eps))
    return (nll * keep[:, None, :]).sum()


# --------------------------------------------------------------------------------------
# Auxiliary classifiers
# --------------------------------------------------------------------------------------


def parse_loss(parser: BiaffineParser, states: Tensor, parent: Tensor, labels: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """(arc, label) cross-entropies summed over the tokens ``keep``; the candidate heads of a
    token are the positions ``keep`` (a root's head is itself), labels are scored at the gold head."""
    r = parser.norm(states)
    # the dtype's minimum, not -inf: a row with no candidate (an all-padding sentence) stays finite
    arcs = parser.arc_scores(r).float().masked_fill(~keep[:, None, :], torch.finfo(torch.float32).min)
    arc = F.cross_entropy(arcs.flatten(0, 1), parent.masked_fill(~keep, IGNORE).flatten(), ignore_index=IGNORE, reduction="sum")
    return arc, tagging_loss(parser.label_scores(r, parent), labels, keep)


# --------------------------------------------------------------------------------------
# The training objective
# --------------------------------------------------------------------------------------


class MultitaskObjective(AuxiliaryObjective):
    """The terms of ``train.multitask``: ``pos``, ``deprel``, ``lisa``, ``parse_arc`` and ``parse_label``."""

    def __init__(self, cfg: MultitaskConfig, enc_layers: int):
        self.cfg, self.tasks = cfg, cfg.tasks()
        self.lisa_heads: dict[torch.device, Tensor] = {}  # the supervised heads' indices, per device
        self.lisa_layers = [layer % enc_layers for layer in cfg.lisa.layers] if "lisa" in self.tasks else []
        self.encoder_weights = frozenset(self.lisa_layers)
        tags = ({cfg.pos.tags} if "pos" in self.tasks else set()) | ({"deprel"} if {"deprel", "parse"} & set(self.tasks) else set())
        self.feature_spec = FeatureSpec(tags=frozenset(tags), parent=bool({"lisa", "parse"} & set(self.tasks)))

    def terms(self, model: nn.Module, batch, out) -> dict[str, Tensor]:
        """Unweighted terms, each summed over the batch's real source pieces."""
        f, keep, states, heads = batch.features, token_mask(batch.src), out.encoder.layers, model.multitask
        terms = {}
        for name in ("pos", "deprel"):
            if name in self.tasks:
                task = self.tasks[name]
                terms[name] = tagging_loss(heads[name](states[task.layer]), f.tag(getattr(task, "tags", name)), keep)
        if self.lisa_layers:
            attn, heads_at = out.encoder.self_attention, self.heads_on(batch.src.device)
            terms["lisa"] = sum(lisa_loss(attn[layer].index_select(1, heads_at), f.parents(), keep) for layer in self.lisa_layers)
        if "parse" in self.tasks:
            terms["parse_arc"], terms["parse_label"] = parse_loss(heads["parse"], states[self.cfg.parse.layer], f.parents(), f.tag("deprel"), keep)
        return terms

    def heads_on(self, device: torch.device) -> Tensor:
        """The supervised heads as an index tensor on ``device``, made once (not inside a graph capture)."""
        if device not in self.lisa_heads:
            self.lisa_heads[device] = torch.tensor(self.cfg.lisa.heads, device=device)
        return self.lisa_heads[device]

    def weights(self, step: int | Tensor) -> dict[str, float | Tensor]:
        w = {name: task.weight * decay(step, task.decay) for name, task in self.tasks.items()}
        w["parse_arc"] = w["parse_label"] = w.pop("parse", 0.0)
        return w


def multitask_objective(cfg: Config) -> MultitaskObjective | None:
    """The objective of ``cfg``, or None when no task is on."""
    mt = cfg.train.multitask
    return MultitaskObjective(mt, cfg.model.enc_layers) if mt.enabled else None
