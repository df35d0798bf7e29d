"""One measured process of ``benchmarks/fast_paths.py``: syntaxnmt's side of the side-by-side
benchmark (``benchmarks/peers/run_syntaxnmt.py``) without one CPU fast path.

    python benchmarks/fast_path_run.py VARIANT [--choice CHOICE] train  --config CFG --updates 90 --warmup 10
    python benchmarks/fast_path_run.py VARIANT [--choice CHOICE] decode --config CFG --test-src FILE --beam 5 --force-length 20

VARIANT is a name of ``fast_path_variants.VARIANTS``, or ``none`` (all paths); CHOICE fixes the
CPU kernels (``"openblas, row packing"``, ``onednn`` ...: the calibration's one candidate) instead
of calibrating them. The removal is a
patch of this process only (``fast_path_variants.removed``); the calls into every path are
counted and printed as a ``PATHS {json}`` line after run_syntaxnmt's ``RESULT`` line.
"""

from __future__ import annotations

import syntaxnmt.__main__  # noqa: F401  (first: the command's OpenMP defaults, set before torch loads)

# isort: split
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "peers")]  # fast_path_variants, speed; run_syntaxnmt

import fast_path_variants  # noqa: E402

if __name__ == "__main__":
    sys.exit(fast_path_variants.child_main(sys.argv[1:]))
