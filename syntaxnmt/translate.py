"""Translating with a trained model: load it, batch sentences by length, search, detokenize."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.batches import make_batch
from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.config import Config, DecodeConfig, config_from_dict
from syntaxnmt.model import build_model
from syntaxnmt.prepare import Tokenizers, load_tokenizers
from syntaxnmt.search import Hypothesis, max_output_length, search


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def checkpoint_path(cfg: Config, which: str) -> Path:
    """``best``/``last`` name a checkpoint of the run in ``cfg.work_dir``; anything else is a path."""
    return Path(cfg.work_dir) / f"{which}.pt" if which in ("best", "last") else Path(which)


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Config, Tokenizers]:
    """A model ready for inference, with the config it was trained with and its tokenizers."""
    state = load_checkpoint(path)
    cfg = config_from_dict(state["config"], source=f"{path} (stored config)")
    toks = load_tokenizers(cfg)
    model = build_model(cfg.model, len(toks.src), len(toks.tgt))
    model.load_state_dict(state["model"])
    return model.to(device).eval(), cfg, toks


def translate_ids(
    model: torch.nn.Module,
    sources: Sequence[np.ndarray],
    decode: DecodeConfig,
    device: torch.device,
    *,
    beam: int | None = None,
    nbest: int = 1,
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Search every source (subword ids, no EOS) in batches of similar length; results in input order."""
    beam = decode.beam_size if beam is None else beam
    max_pos = getattr(getattr(model, "cfg", None), "max_positions", 1024) - 2
    order = np.argsort([len(s) for s in sources], kind="stable")[::-1]
    results: list[list[Hypothesis]] = [None] * len(sources)  # type: ignore[list-item]
    model.eval()
    with tqdm(total=len(sources), desc="translate", unit="sent", disable=not progress, leave=False) as bar:
        for start in range(0, len(order), decode.batch_size):
            idx = order[start : start + decode.batch_size]
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist()).to(device)
            src_lens = batch.src.ne(0).sum(1) - 1
            max_len = max_output_length(src_lens, decode.max_len_a, decode.max_len_b, max_pos)
            hyps = search(model, batch, beam, max_len, decode.min_len, decode.length_penalty, nbest)
            for i, h in zip(idx, hyps):
                results[i] = h
            bar.update(len(idx))
    return results


def translate_lines(model, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, **kw) -> list[list[tuple[str, float]]]:
    """Raw source lines to detokenized n-best lists of (translation, score)."""
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(list(lines))]
    hyps = translate_ids(model, sources, decode, device, **kw)
    return [[(toks.tgt.decode(h.tokens), h.score) for h in nb] for nb in hyps]
