"""Reading text files (plain or gzip, strict UTF-8) and writing files atomically."""

from __future__ import annotations

import glob
import gzip
import io
import os
import re
import shutil
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


_TEMPORARY = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)\.)?[^.]+\.tmp$")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str = "*") -> list[Path]:
    """Remove what interrupted atomic writes (kill -9, a power cut) left in ``folder``: the
    temporaries ``.NAME.PID.XXXX.tmp`` of target ``name`` (every target by default) whose
    writing process is gone, and those of older versions, which carry no PID. Returns them."""
    folder = Path(folder)
    removed = []
    for tmp in folder.glob(f".{name if name == '*' else glob.escape(name)}.*.tmp") if folder.is_dir() else []:
        m = _TEMPORARY.match(tmp.name)
        if m is None or (m.group("pid") and _process_alive(int(m.group("pid")))):
            continue
        try:
            shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink()
        except FileNotFoundError:  # removed by another process meanwhile
            continue
        removed.append(tmp)
    return removed


def temporary_prefix(path: str | os.PathLike) -> str:
    """The name prefix of this process's temporaries for ``path`` (see :func:`remove_stale_temporaries`)."""
    return f".{Path(path).name}.{os.getpid()}."


def new_file_mode() -> int:
    """The permissions ``open()`` gives a new file: 0o666 without the bits of the umask."""
    try:  # race-free (Linux 4.7+); os.umask must set the mask to read it
        with open("/proc/self/status", encoding="ascii") as f:
            mask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | os.PathLike, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write ``path`` by calling ``write(f)`` on a temporary file in the same folder, then rename.

    A reader never sees a half-written file, and an interrupted write leaves the old file intact
    (an exception or a signal removes the temporary; one left by kill -9 is removed by the next
    write of ``path``). The file gets the permissions of the file it replaces, else those the
    umask allows (not ``mkstemp``'s 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, path.name)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = new_file_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=".tmp")
    try:
        os.fchmod(fd, mode)
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
