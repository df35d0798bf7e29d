"""Checkpoints: written atomically (temp file, then rename), loaded with a clear error."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Serialize ``state`` to memory, then write it atomically: a crash never leaves half a file."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(path, lambda f: f.write(buf.getbuffer()))


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated or foreign file
        raise UserError(f"{path}: not a readable syntaxnmt checkpoint ({type(e).__name__}: {e})") from None
