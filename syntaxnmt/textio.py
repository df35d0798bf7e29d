"""Reading text files (plain or gzip, strict UTF-8) and writing files atomically."""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Iterator, Sequence

from syntaxnmt.errors import UserError

MAX_LINE_BYTES = 1 << 20
"""The longest line a text input may hold: 1 MiB of UTF-8, its line ending excluded. A longer
line -- or an input with no newline within that much, such as ``-i /dev/zero`` -- is a
:class:`UserError` naming the file and line, read in bounded steps (never unbounded memory)."""

MAX_TEXT_BYTES = 256 << 20
"""The largest whole-file text input :func:`read_text` reads (a YAML config, a JSON contrastive set): 256 MiB."""

BOM = "\ufeff"
"""The byte-order mark: removed from the start of every text input (editors on Windows write it),
so that no command reads it as part of the first word, document id or reference."""

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _open_binary(path: Path):
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a text file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _decode(raw: bytes, name: object, lineno: int) -> str:
    """One line of bytes as text: strict UTF-8, the byte-order mark of line 1 removed."""
    if lineno == 1 and raw.startswith(_UTF16_BOMS):
        raise UserError(f"{name}:1: starts with a UTF-16 byte-order mark: syntaxnmt reads UTF-8 (convert it, e.g. iconv -f UTF-16 -t UTF-8)")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{name}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    return line.removeprefix(BOM) if lineno == 1 else line


def iter_stream_lines(stream, name: object, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Yield the lines of the binary ``stream`` (named ``name`` in errors) without their line
    ending: strict UTF-8, a leading byte-order mark removed, each line at most ``max_line_bytes``
    (read in bounded steps, so an input without newlines ends in a :class:`UserError`)."""
    cap = max_line_bytes + 2  # room for "\r\n"
    lineno = 0
    try:
        while raw := stream.readline(cap):
            lineno += 1
            if (len(raw) >= cap and not raw.endswith(b"\n")) or len(raw.rstrip(b"\r\n")) > max_line_bytes:
                raise UserError(f"{name}:{lineno}: line longer than {max_line_bytes:,} bytes (the limit of a text line; is it a text file with newlines?)")
            yield _decode(raw, name, lineno).rstrip("\r\n")
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise UserError(f"{name}: cannot read after line {lineno}: {e}") from None


def iter_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a plain or ``.gz`` UTF-8 file without their line ending.

    A byte-order mark at its start is removed. Invalid UTF-8, a corrupt gzip stream or a line
    over :data:`MAX_LINE_BYTES` raise :class:`UserError` naming the file and line.
    """
    path = Path(path)
    with _open_binary(path) as f:
        yield from iter_stream_lines(f, path)


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a text file (see :func:`iter_lines`)."""
    return list(iter_lines(path))


def read_input(path: str | os.PathLike | None) -> list[str]:
    """All lines of the text input ``path``, or of standard input (``<stdin>`` in errors) when it
    is None or ``-``; read as :func:`iter_lines` reads a file."""
    if path and str(path) != "-":
        return read_lines(path)
    return list(iter_stream_lines(sys.stdin.buffer, "<stdin>"))


def read_text(path: str | os.PathLike, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The whole text file ``path`` (a config): strict UTF-8 without a leading byte-order mark, at
    most ``max_bytes``; a :class:`UserError` naming the file otherwise."""
    path = Path(path)
    with _open_binary(path) as f:
        try:
            raw = f.read(max_bytes + 1)
        except OSError as e:
            raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(raw) > max_bytes:
        raise UserError(f"{path}: larger than {max_bytes:,} bytes, the limit of this text input")
    if raw.startswith(_UTF16_BOMS):
        _decode(raw, path, 1)  # the UTF-16 error
    try:
        return raw.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as e:
        lineno = raw.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


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


def refuse_protected_folder(folder: str | os.PathLike, keep: Sequence[str | os.PathLike] = ()) -> None:
    """Refuse (:class:`UserError`) to remove or replace ``folder`` when it is the current
    directory or one of its parents, a symbolic link, or holds one of the paths ``keep`` (e.g. the
    checkpoint being exported)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise UserError(f"{folder}: is a symbolic link; syntaxnmt does not replace it (give the folder itself, or a new one)")
    real = folder.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        where = "the current directory" if real == cwd else f"a parent of the current directory {cwd}"
        raise UserError(f"{folder}: is {where}; syntaxnmt does not replace it (give a new folder)")
    for path in keep:
        inside = Path(path).resolve()
        if inside == real or real in inside.parents:
            what = "is" if inside == real else "holds"
            raise UserError(f"{folder}: {what} {path}; syntaxnmt does not replace its own input (give a new folder)")


def write_marker(folder: str | os.PathLike, marker: str, written_by: str, **info) -> None:
    """Write the file ``marker`` in ``folder``: one line of JSON saying what wrote the folder, so
    that a later ``--force``/``--fresh`` may replace it (:func:`holds_marker`)."""

    text = json.dumps({"written_by": written_by, "version": package_version(), **info}, ensure_ascii=False)
    (Path(folder) / marker).write_text(text + "\n", encoding="utf-8")


def holds_marker(folder: str | os.PathLike, marker: str, written_by: str) -> bool:
    """Whether ``folder`` holds the marker :func:`write_marker` writes for ``written_by``."""
    path = Path(folder) / marker
    if path.is_symlink() or not path.is_file():
        return False
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(info, dict) and info.get("written_by") == written_by


def new_file_mode() -> int:
    """The permissions ``open()`` gives a new file: 0o666 without the bits of the umask."""
    try:  # race-free (Linux 4.7+); os.umask must set the mask to read it
        with open("/proc/self/status", encoding="ascii") as f:
            mask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def _write_special(path: Path, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write straight into ``path``, a FIFO or a device (no temporary, no rename)."""
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
    except BrokenPipeError:  # the reader went away, as with ``| head`` on stdout
        raise
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e})") from None


def atomic_write(path: str | os.PathLike, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write ``path`` by calling ``write(f)`` on a temporary file in the same folder, then rename.

    A reader never sees a half-written file, and an interrupted write leaves the old file intact
    (an exception or a signal removes the temporary; one left by kill -9 is removed by the next
    write of ``path``). The file gets the permissions of the file it replaces, else those the
    umask allows (not ``mkstemp``'s 0600). A ``path`` that is a FIFO, a device or a socket is
    written directly (it stays what it is); a folder is refused. A write that fails (a full disk,
    no permission) is a :class:`UserError` naming ``path`` and leaves no temporary behind.
    """
    path = Path(path)
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path}: is a directory, expected a file to write")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_special(path, write)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path}: cannot create its folder {path.parent} ({e.strerror or e})") from None
    remove_stale_temporaries(path.parent, path.name)
    mode = stat.S_IMODE(st.st_mode) if st is not None else new_file_mode()
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=".tmp")
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e})") from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):  # a full disk: name the target, not the temporary
            raise UserError(f"{path}: cannot write ({e.strerror or e})") from None
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a UTF-8 text file atomically."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_lines(path: str | os.PathLike, lines) -> None:
    """Write lines (without newlines) atomically, one per line."""
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def package_version() -> str:
    """The installed package's version ("unknown" when it is not installed)."""
    try:
        return version("syntaxnmt")
    except PackageNotFoundError:
        return "unknown"
