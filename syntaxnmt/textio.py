"""Reading text files (plain or gzip, strict UTF-8) and writing files atomically."""

from __future__ import annotations

import contextlib
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
from typing import Callable, Iterator, Mapping, Sequence

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


_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.syntaxnmt-(?P<pid>\d+)\.[a-z0-9_]{8}\.tmp$")
"""The name of a temporary of :func:`atomic_write` (and of the folders built beside their target):
``.NAME.syntaxnmt-PID.XXXXXXXX.tmp`` -- the writer's PID and ``mkstemp``'s eight characters, a
pattern no user file has (a user's ``.backup.2024.tmp/`` is not one)."""


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def is_temporary(name: str) -> bool:
    """Whether ``name`` is the name of one of syntaxnmt's temporaries (:data:`_TEMPORARY`)."""
    return _TEMPORARY.match(name) is not None


def _remove_stale(tmp: Path, name: str) -> bool:
    m = _TEMPORARY.match(tmp.name)
    if m is None or (name != "*" and m.group("name") != name) or _process_alive(int(m.group("pid"))):
        return False
    try:
        shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink()
    except FileNotFoundError:  # removed by another process meanwhile
        return False
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str = "*", recursive: bool = False) -> list[Path]:
    """Remove what interrupted atomic writes (kill -9, a power cut) left in ``folder``: the
    temporaries ``.NAME.syntaxnmt-PID.XXXXXXXX.tmp`` of target ``name`` (every target by default)
    whose writing process is gone -- nothing else. ``recursive``: in the subfolders too (a run's
    ``checkpoints/``; symbolic links are not followed). Returns what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for top, dirs, files in os.walk(folder) if recursive else [(str(folder), [], [p.name for p in folder.iterdir()])]:
        for entry in [*files, *dirs]:
            tmp = Path(top) / entry
            if _remove_stale(tmp, name):
                removed.append(tmp)
        dirs[:] = [d for d in dirs if not is_temporary(d)]  # a live writer's temporary folder: not entered
    return removed


def temporary_prefix(path: str | os.PathLike) -> str:
    """The name prefix of this process's temporaries for ``path`` (see :func:`remove_stale_temporaries`)."""
    return f".{Path(path).name}.syntaxnmt-{os.getpid()}."


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


def marker_info(folder: str | os.PathLike, marker: str, written_by: str) -> dict | None:
    """What the marker :func:`write_marker` wrote for ``written_by`` in ``folder`` says (None: no such marker)."""
    path = Path(folder) / marker
    if path.is_symlink() or not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("written_by") == written_by else None


def holds_marker(folder: str | os.PathLike, marker: str, written_by: str) -> bool:
    """Whether ``folder`` holds the marker :func:`write_marker` writes for ``written_by``."""
    return marker_info(folder, marker, written_by) is not None


Owned = Mapping[str, "Owned | None"]
"""What a command writes in a folder, entry by entry: a name maps to None (the whole entry is the
command's) or to the owned entries inside that subfolder. Its marker and its temporaries are
always its own."""


def foreign_entries(folder: str | os.PathLike, owned: Owned, marker: str = "") -> list[str]:
    """The entries of ``folder`` (relative paths, sorted) that ``owned`` does not list: what a user
    put there, which syntaxnmt never removes or replaces."""
    folder, found = Path(folder), []
    for p in sorted(folder.iterdir()):
        if p.name == marker or is_temporary(p.name):
            continue
        if p.name not in owned:
            found.append(p.name)
        elif owned[p.name] is not None:
            inner = owned[p.name]
            found += [f"{p.name}/{x}" for x in foreign_entries(p, inner)] if p.is_dir() and not p.is_symlink() else [p.name]
    return found


def listing(names: Sequence[str], most: int = 4) -> str:
    """``a, b, c, ...``: the first ``most`` of ``names`` for a one-line message."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def check_removable(folder: str | os.PathLike, marker: str, written_by: str, owned: Owned, advice: str) -> None:
    """Refuse (:class:`UserError`, one line ending with ``advice``) to remove ``folder`` unless
    ``written_by`` wrote and marked it (:func:`write_marker`) and every entry in it is its own
    (:func:`foreign_entries`); never the current directory, a parent of it or a symbolic link."""
    folder = Path(folder)
    refuse_protected_folder(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder")
    if not holds_marker(folder, marker, written_by):
        held = sorted(p.name for p in folder.iterdir())
        raise UserError(f"{folder}: not a folder written by `{written_by}` (no {marker} in it{'; it holds ' + listing(held) if held else ''}); {advice}")
    foreign = foreign_entries(folder, owned, marker)
    if foreign:
        raise UserError(f"{folder}: holds what `{written_by}` did not write ({listing(foreign)}); {advice}")


def claim_folder(folder: str | os.PathLike, marker: str, written_by: str, force: bool = False) -> None:
    """Before ``written_by`` writes its files into ``folder``: a new or empty folder is created
    and marked as its own; a folder it marked is its own; any other folder holding files is
    refused (one line listing them) unless ``force`` (the user's word: its files may be written
    over; it stays unmarked)."""
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists() or folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder (give a new or empty folder)")
    held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if not held:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{folder}: cannot create the folder ({e.strerror or e})") from None
        write_marker(folder, marker, written_by)
    elif not force and not holds_marker(folder, marker, written_by):
        raise UserError(
            f"{folder}: holds files `{written_by}` did not write ({listing(held)}); it writes into a new or empty folder or one it wrote: "
            "give another folder, or --force to write over its files"
        )


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def check_outputs(outputs: Sequence[tuple[str, str | os.PathLike | None]], inputs: Sequence[tuple[str, str | os.PathLike | None]]) -> None:
    """Refuse (one line) an output that is one of the command's inputs -- the same path, or the same
    file under another name (:func:`os.path.samefile`: a link, ``./x``) -- or that two outputs share.
    ``outputs``/``inputs``: (option, path) pairs, None or ``-`` for none. FIFOs and devices are left
    out (``-i /dev/stdin -o /dev/stdout`` may be one terminal)."""
    seen: list[tuple[str, str | os.PathLike]] = []
    for option, out in outputs:
        if out is None or str(out) in ("", "-") or (os.path.exists(out) and not (os.path.isfile(out) or os.path.isdir(out))):
            continue
        for in_option, given in inputs:
            if given is not None and str(given) not in ("", "-") and _same_file(out, given):
                raise UserError(f"{out}: {option} is also {in_option} {given}, an input of this command: give another output file")
        for other_option, other in seen:
            if _same_file(out, other):
                raise UserError(f"{out}: given as {other_option} and as {option}: give each output its own file")
        seen.append((option, out))


LOCK_FILE = ".syntaxnmt-lock"
_HELD: dict[str, int] = {}  # the folders this process holds the lock of, with the depth of their nested blocks


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, what: str = "work_dir", log: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of ``folder`` (``fcntl.flock`` on its :data:`LOCK_FILE`, which names
    the holder's PID and host) while the block runs: a second writer gets a :class:`UserError`
    naming the holder. The kernel releases the lock of a process that dies; its text is then
    stale, and the next holder says it takes it over. A block inside another of the same process
    and folder (an experiment run, then its training) holds it already."""
    key = os.path.realpath(folder)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    with _flock(Path(folder), what, log):
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]


@contextlib.contextmanager
def _flock(folder: Path, what: str, log: Callable[[str], None] | None) -> Iterator[None]:
    import fcntl
    import socket

    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise UserError(f"{folder}: cannot create the lock file {LOCK_FILE} of the {what} ({e.strerror or e})") from None
    with os.fdopen(fd, "r+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = f.read().strip() or "another process"
            raise UserError(f"{folder}: the {what} is in use by {holder} (its lock file {folder / LOCK_FILE}): wait for it to finish, or choose another {what}") from None
        stale = f.read().strip()
        if stale and log:
            log(f"{folder}: took over the lock of {stale}, which is no longer running")
        f.seek(0)
        f.truncate()
        f.write(f"syntaxnmt pid {os.getpid()} on host {socket.gethostname()}\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()  # released cleanly: no stale holder to report
            f.flush()
            if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:  # a run refused before writing: no litter
                with contextlib.suppress(OSError):
                    (folder / LOCK_FILE).unlink()
                    folder.rmdir()


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
    if st is not None and (not os.access(path, os.W_OK) or not st.st_mode & 0o222):  # as cp refuses it (root too: no write bit)
        raise UserError(f"{path}: cannot write (Permission denied: the file is write-protected)")
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
