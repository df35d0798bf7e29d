"""The ``syntaxnmt`` command (the console script, ``python -m syntaxnmt``, ``torchrun -m syntaxnmt``):
sets OpenMP's defaults for a machine shared with other work, then runs :func:`syntaxnmt.cli.main`.

torch's OpenMP runtime (libgomp) reads ``OMP_*`` once, when ``import torch`` loads it, so the
defaults are set here, before the first import of torch (a value set later has no effect).
``OMP_WAIT_POLICY=PASSIVE``: a thread waiting at a barrier sleeps instead of spinning, so it
gives its core back to a thread that still has work -- on a busy machine, often the other thread
of the same operation (docs/benchmarks.md, "Thread policy"). A user who sets ``OMP_WAIT_POLICY``
or ``GOMP_SPINCOUNT`` keeps them. The number of threads is chosen later, by
:func:`syntaxnmt.runtime.configure_threads`.
"""

from __future__ import annotations

import os
from typing import Mapping

OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
USER_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # either one means the user chose how threads wait


def openmp_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``environ``: :data:`OPENMP_DEFAULTS`, unless the user set how
    OpenMP threads wait (an empty value counts as unset)."""
    if any(environ.get(k, "").strip() for k in USER_WAIT_SETTINGS):
        return {}
    return dict(OPENMP_DEFAULTS)


os.environ.update(openmp_defaults(os.environ))

from syntaxnmt.cli import main  # noqa: E402  (after the environment: this import loads torch)

if __name__ == "__main__":
    main()
