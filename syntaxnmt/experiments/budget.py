"""The update budget of a converged study, fixed on the baseline's dev curve before any variant runs.

One validation's dev BLEU moves by up to a BLEU point from checkpoint to checkpoint, so the curve is
first smoothed: m(s) is the mean dev BLEU of the ``smooth`` (3) validations ending at update s.
The curve is judged as a whole, as far as it is trained (``--curve`` trains ``budget.curve_steps``):

- it has plateaued when its last fifth (``horizon`` 0.2) raises the best m by less than
  ``min_gain`` (0.3): max{m(s) : s > 0.8·end} − max{m(s) : s <= 0.8·end} < min_gain; else it is
  still rising and must be trained further;
- the budget is the first update s whose m(s) is within ``tolerance`` (0.5 BLEU) of the curve's
  best: m(s) >= max m − tolerance.

Rules that look only a fifth ahead of each point fire on the curve's local stalls: on the
Multi30k curve of stop 55 (validations every 250 updates) "the next fifth gains under 0.3" fixed
1,750 on one validation's dip (34.71, 34.53, 35.22), and, smoothed over 3 validations, 2,750 on a
stall (means 35.65, 35.95, 35.76) that the curve left 1.5 BLEU behind by 4,000 (37.13).

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


def late_gain(curve: Sequence[tuple[int, float]], horizon: float = 0.2, smooth: int = 3) -> float | None:
    """How much the curve's last ``horizon`` of updates raises its best smoothed dev BLEU (None: too
    few validations on either side to say)."""
    points = smoothed(curve, smooth)
    cut = (1 - horizon) * curve[-1][0] if curve else 0
    before, late = [b for s, b in points if s <= cut], [b for s, b in points if s > cut]
    return max(late) - max(before) if before and late else None


def budget_point(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2, smooth: int = 3, tolerance: float = 0.5) -> int | None:
    """The first update whose smoothed dev BLEU (:func:`smoothed`) is within ``tolerance`` of the
    curve's best, once the curve has plateaued (:func:`late_gain` under ``min_gain``); None while
    it is still rising."""
    gain = late_gain(curve, horizon, smooth)
    if gain is None or gain >= min_gain:
        return None
    points = smoothed(curve, smooth)
    best = max(b for _, b in points)
    return next(s for s, b in points if b >= best - tolerance)


def describe(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2, smooth: int = 3, tolerance: float = 0.5) -> str:
    """The curve, its smoothed values and the budget, as printed by the command."""
    point = budget_point(curve, min_gain, horizon, smooth, tolerance)
    mean = dict(smoothed(curve, smooth))
    lines = [f"update  dev BLEU  mean of {smooth}"] + [
        f"{s:>6}  {b:8.2f}  " + (f"{mean[s]:9.2f}" if s in mean else " " * 9) + ("  <- budget" if s == point else "") for s, b in curve
    ]
    lines = [line.rstrip() for line in lines]
    gain = late_gain(curve, horizon, smooth)
    if point is None:
        rise = "" if gain is None else f" (+{gain:.2f})"
        lines.append(f"no budget yet: the last {horizon:.0%} of the updates (to {curve[-1][0]}) still raise the best dev BLEU (mean of {smooth} validations) by {min_gain} or more{rise}; train the curve further")
    else:
        best = max(mean.values())
        lines.append(
            f"budget: max_steps {point} (the first update whose dev BLEU, the mean of {smooth} validations, is within {tolerance} of the curve's best, {best:.2f}; "
            f"the last {horizon:.0%} of the updates {'raised' if gain >= 0 else 'lowered'} the best by {abs(gain):.2f}, a gain under {min_gain})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m syntaxnmt.experiments.budget LOG``."""
    from syntaxnmt.runtime import run_command

    parser = argparse.ArgumentParser(prog="python -m syntaxnmt.experiments.budget", description="the update budget from a baseline's dev-BLEU curve")
    parser.add_argument("log", help="a validation log (valid.log of a set's run, train.log, or saved train output)")
    parser.add_argument("--min-gain", type=float, default=0.3, help="gain of the best dev BLEU over the curve's last fifth below which it has plateaued (default 0.3)")
    parser.add_argument("--horizon", type=float, default=0.2, help="the curve's last part judged for a plateau, as a fraction of its updates (default 0.2: the last fifth)")
    parser.add_argument("--smooth", type=int, default=3, help="validations averaged into each point of the curve (default 3; 1: none)")
    parser.add_argument("--tolerance", type=float, default=0.5, help="the budget's distance below the curve's best smoothed dev BLEU (default 0.5)")
    args = parser.parse_args(argv)
    if args.smooth < 1:
        parser.error("--smooth must be at least 1")
    run_command(lambda: print(describe(read_curve(args.log), args.min_gain, args.horizon, args.smooth, args.tolerance)))


if __name__ == "__main__":
    main()
