"""Reading text files (plain or gzip, strict UTF-8) and writing files atomically."""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from syntaxnmt.errors import UserError


def _open_binary(path: Path):
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a text file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a plain or ``.gz`` UTF-8 file without their line ending.

    Invalid UTF-8 or a corrupt gzip stream raise :class:`UserError` naming the file and line.
    """
    path = Path(path)
    with _open_binary(path) as f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise UserError(f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
                yield line.rstrip("\r\n")
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise UserError(f"{path}: cannot read after line {lineno}: {e}") from None


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a text file (see :func:`iter_lines`)."""
    return list(iter_lines(path))


def atomic_write(path: str | os.PathLike, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write ``path`` by calling ``write(f)`` on a temporary file in the same folder, then rename.

    A reader never sees a half-written file, and an interrupted write leaves the old file intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a UTF-8 text file atomically."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_lines(path: str | os.PathLike, lines) -> None:
    """Write lines (without newlines) atomically, one per line."""
    atomic_write_text(path, "".join(line + "\n" for line in lines))
