"""Parallel text: reading line-aligned files and filtering pairs, with counts for the report."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines


@dataclass
class ParallelText:
    """Line-aligned sentence pairs; ``line_numbers`` are 1-based positions in the original files."""

    src: list[str]
    tgt: list[str]
    line_numbers: list[int]
    counts: dict[str, int] = field(default_factory=dict)


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> ParallelText:
    """Read two line-aligned files (plain or .gz), dropping (and counting) pairs with an empty side.

    Files whose line counts differ are a :class:`UserError` that prints both counts.
    """
    src = read_lines(src_path)
    tgt = read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: parallel files must be line-aligned")
    keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if s.strip() and t.strip()]
    return ParallelText(
        src=[src[i] for i in keep],
        tgt=[tgt[i] for i in keep],
        line_numbers=[i + 1 for i in keep],
        counts={"read": len(src), "empty": len(src) - len(keep)},
    )


def length_filter(src_lens: list[int], tgt_lens: list[int], min_len: int, max_len: int, max_ratio: float) -> tuple[list[int], dict[str, int]]:
    """Indices of pairs within ``[min_len, max_len]`` on both sides and a length ratio <= ``max_ratio``.

    Returns the kept indices and the number dropped by each rule (a pair counts under the first rule it fails).
    """
    keep, too_short, too_long, ratio = [], 0, 0, 0
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        if min(s, t) < min_len:
            too_short += 1
        elif max(s, t) > max_len:
            too_long += 1
        elif max(s, t) / max(1, min(s, t)) > max_ratio:
            ratio += 1
        else:
            keep.append(i)
    return keep, {"too_short": too_short, "too_long": too_long, "bad_ratio": ratio}
