"""The update budget of a converged study, fixed on the baseline's dev curve before any variant runs.

One validation's dev BLEU moves by a few tenths from checkpoint to checkpoint, so the curve is
first smoothed: m(s) is the mean dev BLEU of the ``smooth`` (3) validations ending at update s.
The budget is the first validated update s after which the smoothed curve gains less than
``min_gain`` (0.3) over the next fifth of the updates: max{m(s') : s < s' <= s + horizon·s} − m(s)
< min_gain, ``horizon`` = 0.2 (20 % more training buys under 0.3 BLEU). A point whose window
reaches past the end of the curve is not judged (the curve must be trained further), nor one
whose window holds no later validation (validate at least every horizon·s updates), nor one with
fewer than ``smooth`` validations up to it. Unsmoothed (``smooth`` 1), one dip fixes the budget:
the Multi30k curve of stop 55 validated every 250 updates read 34.71, 34.53, 35.22 at updates
1,750-2,250 and would have stopped at 1,750, 3 BLEU below the same model's GPU plateau.

The curve is read from the ``update N | dev ... BLEU X`` lines that training logs (a run's
``valid.log`` written by ``syntaxnmt experiment``, its ``train.log`` under ``--jobs``, or any saved
output of ``syntaxnmt train``)::

    python -m syntaxnmt.experiments.budget runs/.../baseline-converged-curve/valid.log

``syntaxnmt experiment SET --curve`` trains the set's baseline curve and prints the same.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Sequence

from syntaxnmt.errors import UserError

VALID_LINE = re.compile(r"update (\d+) \| dev .*?BLEU (-?[0-9.]+)")
CURVE_FILE = "valid.log"


def read_curve(path: str | Path) -> list[tuple[int, float]]:
    """(update, dev BLEU) of every validation logged in ``path``, in update order (the last line of
    an update wins, e.g. after a resume)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: validation log not found")
    points: dict[int, float] = {}
    for line in p.read_text(encoding="utf-8", errors="replace").replace("\r", "\n").splitlines():
        m = VALID_LINE.search(line)
        if m:
            points[int(m.group(1))] = float(m.group(2))
    if not points:
        raise UserError(f"{path}: no 'update N | dev ... BLEU X' line (train with train.valid_bleu: true)")
    return sorted(points.items())


def smoothed(curve: Sequence[tuple[int, float]], smooth: int = 3) -> list[tuple[int, float]]:
    """(update, mean dev BLEU of the ``smooth`` validations ending there), from the ``smooth``-th
    validation on."""
    return [(curve[i][0], sum(b for _, b in curve[i - smooth + 1 : i + 1]) / smooth) for i in range(smooth - 1, len(curve))]


def budget_point(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2, smooth: int = 3) -> int | None:
    """The first update s of ``curve`` after which the smoothed dev BLEU (:func:`smoothed`) gains
    under ``min_gain`` within the next ``horizon``·s updates; None when no point qualifies before
    the curve ends."""
    end = curve[-1][0] if curve else 0
    points = smoothed(curve, smooth)
    for i, (step, bleu) in enumerate(points):
        limit = step + horizon * step
        if limit > end:
            return None
        later = [b for s, b in points[i + 1 :] if s <= limit]
        if later and max(later) - bleu < min_gain:
            return step
    return None


def describe(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2, smooth: int = 3) -> str:
    """The curve, its smoothed values and the budget, as printed by the command."""
    point = budget_point(curve, min_gain, horizon, smooth)
    mean = dict(smoothed(curve, smooth))
    lines = [f"update  dev BLEU  mean of {smooth}"] + [
        f"{s:>6}  {b:8.2f}  " + (f"{mean[s]:9.2f}" if s in mean else " " * 9) + ("  <- budget" if s == point else "") for s, b in curve
    ]
    lines = [line.rstrip() for line in lines]
    what = f"dev BLEU (mean of {smooth} validations)" if smooth > 1 else "dev BLEU"
    if point is None:
        lines.append(f"no budget yet: {what} still gains {min_gain} or more within {horizon:.0%} more updates up to update {curve[-1][0]}; train the curve further")
    else:
        lines.append(f"budget: max_steps {point} (the first update after which {what} gains under {min_gain} over the next {horizon:.0%} of the updates)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m syntaxnmt.experiments.budget LOG``."""
    from syntaxnmt.runtime import run_command

    parser = argparse.ArgumentParser(prog="python -m syntaxnmt.experiments.budget", description="the update budget from a baseline's dev-BLEU curve")
    parser.add_argument("log", help="a validation log (valid.log of a set's run, train.log, or saved train output)")
    parser.add_argument("--min-gain", type=float, default=0.3, help="dev BLEU gain below which training has plateaued (default 0.3)")
    parser.add_argument("--horizon", type=float, default=0.2, help="the window, as a fraction of the updates so far (default 0.2: the next fifth)")
    parser.add_argument("--smooth", type=int, default=3, help="validations averaged into each point of the curve (default 3; 1: none)")
    args = parser.parse_args(argv)
    if args.smooth < 1:
        parser.error("--smooth must be at least 1")
    run_command(lambda: print(describe(read_curve(args.log), args.min_gain, args.horizon, args.smooth)))


if __name__ == "__main__":
    main()
