"""CPU runtime settings.

Training allocates and frees tensors of tens to hundreds of MB every update (the logits of a
4k-token batch over an 8k vocabulary take 131 MB). glibc's malloc serves blocks that large with
``mmap`` and unmaps them on ``free``, so every update pays for page faults on freshly mapped
memory -- on a 2-core machine more than the log-softmax itself. :func:`keep_freed_memory` raises
the mmap and trim thresholds (``mallopt``), so freed blocks stay in the heap and are reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

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
