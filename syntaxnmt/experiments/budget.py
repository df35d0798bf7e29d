"""The update budget of a converged study, fixed on the baseline's dev curve before any variant runs.

The budget is the first validated update s after which dev BLEU gains less than ``min_gain`` (0.3)
over the next fifth of the updates: max{BLEU(s') : s < s' <= s + horizon·s} − BLEU(s) < min_gain,
``horizon`` = 0.2 (20 % more training buys under 0.3 BLEU). A point whose window reaches past the
end of the curve is not judged (the curve must be trained further), nor one whose window holds no
later validation (validate at least every horizon·s updates: 250 from update 1,250 on).

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


def budget_point(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2) -> int | None:
    """The first update s of ``curve`` after which dev BLEU gains under ``min_gain`` within the next
    ``horizon``·s updates; None when no point qualifies before the curve ends."""
    end = curve[-1][0] if curve else 0
    for i, (step, bleu) in enumerate(curve):
        limit = step + horizon * step
        if limit > end:
            return None
        later = [b for s, b in curve[i + 1 :] if s <= limit]
        if later and max(later) - bleu < min_gain:
            return step
    return None


def describe(curve: Sequence[tuple[int, float]], min_gain: float = 0.3, horizon: float = 0.2) -> str:
    """The curve and the budget, as printed by the command."""
    point = budget_point(curve, min_gain, horizon)
    lines = ["update  dev BLEU"] + [f"{s:>6}  {b:8.2f}" + ("  <- budget" if s == point else "") for s, b in curve]
    if point is None:
        lines.append(f"no budget yet: dev BLEU still gains {min_gain} or more within {horizon:.0%} more updates up to update {curve[-1][0]}; train the curve further")
    else:
        lines.append(f"budget: max_steps {point} (the first update after which dev BLEU gains under {min_gain} over the next {horizon:.0%} of the updates)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m syntaxnmt.experiments.budget LOG``."""
    from syntaxnmt.runtime import run_command

    parser = argparse.ArgumentParser(prog="python -m syntaxnmt.experiments.budget", description="the update budget from a baseline's dev-BLEU curve")
    parser.add_argument("log", help="a validation log (valid.log of a set's run, train.log, or saved train output)")
    parser.add_argument("--min-gain", type=float, default=0.3, help="dev BLEU gain below which training has plateaued (default 0.3)")
    parser.add_argument("--horizon", type=float, default=0.2, help="the window, as a fraction of the updates so far (default 0.2: the next fifth)")
    args = parser.parse_args(argv)
    run_command(lambda: print(describe(read_curve(args.log), args.min_gain, args.horizon)))


if __name__ == "__main__":
    main()
