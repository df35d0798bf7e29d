"""What the whole-step calibration of the CPU kernels times for inference: one short beam search."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from syntaxnmt.cpu.calibration import model_signature
from syntaxnmt.data.batches import make_batch
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.decoding.search import search
from syntaxnmt.inputs import TAG_NAMES

TIMING_SHAPE = (8, 20, 10)
"""The decoding step the CPU kernel calibration times: 8 sentences of 20 pieces, beam 5, 10 steps."""


def decoding_step(model: torch.nn.Module, beam: int = 5) -> tuple[str, Callable[[], None]]:
    """What the whole-step calibration of the CPU kernels (:func:`syntaxnmt.cpu.calibration.prepare`)
    times for inference: the signature of the step, and a function running one -- a beam-``beam``
    search of :data:`TIMING_SHAPE` synthetic sentences (fixed random pieces; for a model with
    source features, each parsed as a chain of its pieces with unknown tags) forced to its number
    of output steps."""
    n, length, steps = TIMING_SHAPE
    embed = model.src_embed
    vocab = (embed.tokens if hasattr(embed, "tokens") else embed).num_embeddings  # Transformer's Embeddings, or the RNN's nn.Embedding
    gen = np.random.default_rng(0)
    sources = [gen.integers(min(4, vocab - 1), vocab, size=length) for _ in range(n)]
    annotations = None
    if model.feature_spec:
        chain = SourceAnnotation(np.arange(length), np.arange(length), {name: np.full(length, 2) for name in TAG_NAMES})  # 2: <unk>
        annotations = [chain] * n
    batch = make_batch(sources, None, list(range(n)), annotations, model.feature_spec)

    @torch.no_grad()
    def run() -> None:
        model.eval()
        search(model, batch, beam, steps, min_len=steps)

    return f"infer {model_signature(model)} | beam {beam}, {n} sentences of {length}, {steps} steps", run
