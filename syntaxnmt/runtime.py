"""The process around a command: exit codes and signals (:func:`run_command`), the device
(:func:`resolve_device`), the CPUs it may run on (:func:`usable_cpus`, :func:`cpu_cores`) and the
memory settings of a command (:func:`keep_freed_memory`). CPU threads are
:mod:`syntaxnmt.cpu.threads`'s, the machine's description :mod:`syntaxnmt.cpu.machine`'s.

Training allocates and frees tensors of tens to hundreds of MB every update (the logits of a
4k-token batch over an 8k vocabulary take 131 MB). glibc's malloc serves blocks that large with
``mmap`` and unmaps them on ``free``, so every update pays for page faults on freshly mapped
memory -- on a 2-core machine more than the log-softmax itself. :func:`keep_freed_memory` raises
the mmap and trim thresholds (``mallopt``), so freed blocks stay in the heap and are reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import TYPE_CHECKING, Callable, Collection

from syntaxnmt.errors import Interrupted, UserError, error_line

if TYPE_CHECKING:
    import torch

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_done = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse; True if it took effect (Linux/glibc only)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 31) == 1
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    _done = ok
    return ok


def usable_cpus() -> Collection[int]:
    """The CPUs this process may run on (its CPU affinity; all of them where the system cannot say)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return range(os.cpu_count() or 1)


def cpu_cores() -> int:
    """The CPU cores this process may use (:func:`usable_cpus`)."""
    return len(usable_cpus())


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``; anything else, or CUDA on a
    machine without it, is a user error."""
    import torch  # here: the config (which reads cpu_cores) stays importable without torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r}: this machine has no CUDA GPU that torch can use (try cpu)")
    return device


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


class StdoutError(Exception):
    """Writing the standard output failed (``e``, the OSError): a full disk or a device such as
    ``/dev/full`` behind ``> FILE``, or a reader that went away (``| head``)."""

    def __init__(self, e: OSError, stream):
        self.error, self.stream = e, stream
        where = _stream_target(stream)
        super().__init__(f"cannot write standard output{f' ({where})' if where else ''}: {e.strerror or e}")


def _stream_target(stream) -> str:
    """What a stream writes to (``/dev/full``, a file's path, ``pipe:[...]``), '' where the system cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{stream.fileno()}")
    except (OSError, ValueError, AttributeError):  # no /proc, or a stream without a descriptor (io.UnsupportedOperation)
        return ""


class _GuardedStdout:
    """``sys.stdout`` while :func:`run_command` runs a command: a write error is raised as a
    :class:`StdoutError`, so that it can name the standard output; all else is the stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise StdoutError(e, self._stream) from e

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise StdoutError(e, self._stream) from e

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _drop_stdout(stream) -> None:
    """Point the failed standard output at /dev/null, so that the interpreter's last flush of what
    it still holds does not fail again (Python prints "Exception ignored" and exits with 120)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's capture)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def run_command(func: Callable[[], None]) -> None:
    """Run a command: a user error prints one line ``syntaxnmt: error: ...`` and exits with its
    ``exit_code`` (2 unless it has one); Ctrl-C exits with 130 and SIGTERM with 143 (training
    saves ``last.pt`` first), leaving no temporary file behind. The standard output is flushed
    before the command ends: a write error on it (a full disk behind ``> FILE``) is the one line
    ``syntaxnmt: error: cannot write standard output (FILE): ...`` and exit 2; a reader that went
    away (``| head``) ends the command quietly with 0."""
    keep_freed_memory()
    try:
        old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
    except ValueError:  # not the main thread
        old_term = False
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        func()
        sys.stdout.flush()
    except StdoutError as e:
        _drop_stdout(e.stream)
        if isinstance(e.error, BrokenPipeError):
            sys.exit(0)
        print(f"syntaxnmt: error: {error_line(e)}", file=sys.stderr)
        sys.exit(2)
    except UserError as e:
        print(f"syntaxnmt: error: {error_line(e)}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except Interrupted as e:
        print(f"syntaxnmt: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("syntaxnmt: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as e:  # a folder that cannot be created, a full disk, a file without permission
        print(f"syntaxnmt: error: {error_line(e)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = stdout
        if old_term is not False:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if old_term is None else old_term)
