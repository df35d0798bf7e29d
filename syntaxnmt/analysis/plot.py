"""Attention heatmaps with matplotlib (``syntaxnmt plot``) and the layer x head figure of
``syntaxnmt analyze-heads``.

A heatmap shows one head, or a grid of all heads of a layer, of the encoder self-attention,
decoder self-attention or cross-attention of one sentence, at the word level (pieces combined
as in :func:`~.export.word_level`) or the subword level. Rows are queries, columns keys. When
the columns are source tokens and the sentence has a parse, its dependency arcs are drawn above
them: an arc from the head word to the dependent (a triangle marks the dependent), with the
label at its top (arcs are stacked so that no two labels overlap). A colour bar gives the scale
(white 0, dark blue 1). On cross-attention, word links (gold or extracted Pharaoh alignments) are
outlined: sure links solid, possible links dashed. PNG, SVG or PDF by the output's suffix.
For a HAN model read with its document, a panel beside the heads shows HAN's sentence-level
weights (source tokens x previous sentences, the mean of the heads) and the gate λ of each token
-- for a target-side HAN model another one, of the decoder-side block (target tokens x previous
target sentences, its own translations); for a concatenation model the context's rows and
columns are greyed out.
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from syntaxnmt.analysis.export import SentenceAttention, attention_for_sentences, check_kind, parse_selection, read_attention, read_contexts, read_inputs, word_units
from syntaxnmt.data.links import Links, read_alignments, words_to_subwords
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write

FORMATS = ("png", "svg", "pdf")
CELL = 0.32  # inches per heatmap cell


def pyplot():
    import matplotlib  # deferred: matplotlib loads only for plots

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # deferred: matplotlib loads only for plots

    return plt


def figure_format(path: str | Path) -> str:
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise UserError(f"{path}: the figure format is taken from the suffix: .png, .svg or .pdf")
    return fmt


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` atomically in the format of ``path``'s suffix, then close it."""
    fmt = figure_format(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return Path(path)


# ---------------------------------------------------------------- one sentence


def word_centres(word_of_piece: Sequence[int], words: bool) -> dict[int, float]:
    """Column position of every word: its unit (word level) or the mean of its pieces' positions."""
    units, unit_words = word_units(word_of_piece)
    if words:
        return {int(w): float(u) for u, w in enumerate(unit_words) if w >= 0}
    pos: dict[int, list[int]] = {}
    for p, w in enumerate(word_of_piece):
        if w >= 0:
            pos.setdefault(int(w), []).append(p)
    return {w: float(np.mean(ps)) for w, ps in pos.items()}


ARC_STEP = 0.75
"""Height (in heatmap cells) between the tops of arcs of consecutive levels: room for a label."""


def arc_levels(spans: Sequence[tuple[float, float]], widths: Sequence[float]) -> list[int]:
    """A level (1, 2, ...) for every arc ``(left, right)`` whose label is ``widths[k]`` cells wide:
    an arc stands above the arcs nested inside it, and a label whose box would overlap a label of
    the same level (centred on its arc) moves the arc one level up."""
    order = sorted(range(len(spans)), key=lambda k: (spans[k][1] - spans[k][0], spans[k][0]))
    levels: list[int] = [0] * len(spans)
    placed: list[int] = []
    for k in order:
        lo, hi = spans[k]
        level = 1 + max((levels[j] for j in placed if lo <= spans[j][0] and spans[j][1] <= hi), default=0)
        centre, half = (lo + hi) / 2, widths[k] / 2

        def clashes(lv: int) -> bool:
            return any(levels[j] == lv and abs((spans[j][0] + spans[j][1]) / 2 - centre) < half + widths[j] / 2 for j in placed)

        while clashes(level):
            level += 1
        levels[k] = level
        placed.append(k)
    return levels


def draw_arcs(ax, heads: Sequence[int], deprel: Sequence[str], centres: dict[int, float], fontsize: float = 8) -> float:
    """Dependency arcs above the top edge of a heatmap (y = -0.5, y grows downwards), labelled at
    their tops with labels that never overlap (:func:`arc_levels`); returns the height used."""
    from matplotlib.patches import Arc  # deferred: matplotlib loads only for plots

    arcs = [(dep, head - 1, label) for dep, (head, label) in enumerate(zip(heads, deprel)) if head != 0 and dep in centres and head - 1 in centres]
    spans = [tuple(sorted((centres[h], centres[d]))) for d, h, _ in arcs]
    char = fontsize / 72 / CELL * 0.62  # the width of a label character, in cells
    levels = arc_levels(spans, [char * len(label) + 0.2 for *_, label in arcs])
    top = 0.0
    for (dep, head, label), (lo, hi), level in zip(arcs, spans, levels):
        height = 0.3 + ARC_STEP * level
        top = max(top, height)
        ax.add_patch(Arc(((lo + hi) / 2, -0.5), hi - lo, 2 * height, theta1=180, theta2=360, color="0.25", lw=0.8, clip_on=False))
        ax.plot([centres[dep]], [-0.62], marker="v", ms=3, color="0.25", clip_on=False)
        ax.text((lo + hi) / 2, -0.52 - height, label, ha="center", va="bottom", fontsize=fontsize, color="0.1", clip_on=False,
                bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none"))
    return top + ARC_STEP if top else 0.0


def mark_links(ax, sure: Links, possible: Links, rows: Sequence[int], cols: Sequence[int], words: bool) -> None:
    """Outline the cells of word links ``(source word, target word)`` on a cross-attention heatmap."""
    from matplotlib.patches import Rectangle  # deferred: matplotlib loads only for plots

    for links, style, color in ((possible - sure, "--", "tab:orange"), (sure, "-", "tab:red")):
        if words:
            cells = _word_cells(links, rows, cols)
        else:
            cells = {(q, p) for p, q in words_to_subwords(links, [w for w in cols if w >= 0], [w for w in rows if w >= 0])}
        for r, c in cells:
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec=color, lw=1.2, ls=style))


def _word_cells(links: Links, rows: Sequence[int], cols: Sequence[int]) -> set[tuple[int, int]]:
    _, row_words = word_units(rows)
    _, col_words = word_units(cols)
    row_of = {int(w): u for u, w in enumerate(row_words) if w >= 0}
    col_of = {int(w): u for u, w in enumerate(col_words) if w >= 0}
    return {(row_of[j], col_of[i]) for i, j in links if j in row_of and i in col_of}


def heatmap(ax, s: SentenceAttention, kind: str, layer: int, head: int, words: bool, links: tuple[Links, Links] | None = None, labels: bool = True, fontsize: float = 9):
    """One head's attention of ``s`` on ``ax``: heatmap, token labels, source arcs, alignment links;
    returns the image (for a colour bar)."""
    w = s.word_level(kind) if words else s.weights(kind)
    matrix = w[layer, head]
    rows, cols = s.labels(kind, words)
    image = ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.set_xticks(range(len(cols)))
    ax.set_yticks(range(len(rows)))
    ax.set_xticklabels(cols if labels else [], rotation=90, fontsize=fontsize)
    ax.set_yticklabels(rows if labels else [], fontsize=fontsize)
    ax.tick_params(length=0)
    (_, row_wop, _), (_, col_wop, _) = s.axes(kind)
    top = 0.0
    if kind in ("encoder", "cross") and s.parse is not None:
        top = draw_arcs(ax, s.parse.heads, s.parse.deprel, word_centres(col_wop, words), fontsize - 1)
    ax.set_ylim(len(rows) - 0.5, -0.5 - top)
    ax.set_xlim(-0.5, len(cols) - 0.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if links is not None and kind == "cross":
        mark_links(ax, links[0], links[1], row_wop, col_wop, words)
    shade_context(ax, s, kind, words, len(rows), len(cols))
    return image


CONTEXT_SIDES = {"encoder": ("source", "source"), "decoder": ("decoder_input", "decoder_input"), "cross": ("target", "source")}
"""The (row, column) axis of each attention, for :meth:`SentenceAttention.context_units`."""


def shade_context(ax, s: SentenceAttention, kind: str, words: bool, n_rows: int, n_cols: int) -> None:
    """Grey out the rows and columns of a concatenation model's context (before the current
    sentence's first piece), so the current sentence's weights stand out."""
    row_side, col_side = CONTEXT_SIDES[kind]
    cols, rows = s.context_units(col_side, words), s.context_units(row_side, words)
    if cols:
        ax.axvspan(-0.5, cols - 0.5, color="0.45", alpha=0.22, lw=0)
        ax.axvline(cols - 0.5, color="0.3", lw=1.0, ls=":")
    if rows:
        ax.axhspan(-0.5, rows - 0.5, color="0.45", alpha=0.22, lw=0)
        ax.axhline(rows - 0.5, color="0.3", lw=1.0, ls=":")


HAN_SIDES = ("source", "target")
"""The HAN blocks a panel can show: the encoder-side one (``source``) and the decoder-side one (``target``)."""


def han_rows(s: SentenceAttention, side: str, words: bool) -> list[str]:
    """The row labels of a HAN panel: source tokens, or target tokens (the rows of cross-attention)."""
    return s.labels("encoder", words)[0] if side == "source" else s.labels("cross", words)[0]


def han_panel(ax, s: SentenceAttention, words: bool, fontsize: float = 9, side: str = "source"):
    """HAN's sentence-level weights (source tokens x previous sentences, the mean of the heads;
    with ``side="target"`` the decoder-side block's: target tokens x previous target sentences)
    and, in the last column, the gate λ of each token; returns the image."""
    sentence, gate = s.han_word_level(side) if words else s.han_weights(side)
    matrix = np.concatenate([sentence.mean(0), gate[:, None]], axis=1)
    rows = han_rows(s, side, words)
    k = sentence.shape[-1]
    present = len(s.context_sources or []) if side == "source" else len(s.context_translations or [])
    cols = [f"-{j + 1}" + ("" if j < present else " (none)") for j in range(k)] + ["gate λ"]
    image = ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.axvline(k - 0.5, color="white", lw=3)
    ax.set_xticks(range(k + 1))
    ax.set_yticks(range(len(rows)))
    ax.set_xticklabels(cols, rotation=90, fontsize=fontsize)
    ax.set_yticklabels(rows, fontsize=fontsize)
    ax.tick_params(length=0)
    what = "previous sentences" if side == "source" else "previous translations"
    ax.set_title(f"HAN{'' if side == 'source' else ' (decoder)'}: {what}\n(mean of heads), mean gate {float(gate.mean()):.2f}", fontsize=9)
    return image


def _index(value: int, n: int, what: str) -> int:
    if not -n <= value < n:
        raise UserError(f"{what} {value} out of range: the model has {n}")
    return value % n


def attention_figure(s: SentenceAttention, kind: str = "cross", layer: int = -1, head: int | None = None, words: bool = True, links: tuple[Links, Links] | None = None, title: str = ""):
    """A figure of one head (``head``) or of all heads of ``layer`` (``head=None``) for sentence ``s``."""
    plt = pyplot()
    w = s.weights(check_kind(kind))
    if w is None:
        raise UserError(f"this model has no {kind} self-attention (RNN models have cross-attention only)")
    n_layers, n_heads = w.shape[:2]
    layer = _index(layer, n_layers, "layer")
    heads = list(range(n_heads)) if head is None else [_index(head, n_heads, "head")]
    rows, cols = s.labels(kind, words)
    cols_grid = min(len(heads), 2 if len(heads) <= 4 else 4)
    grid_rows = math.ceil(len(heads) / cols_grid)
    arcs = 0.4 * len(cols) if s.parse is not None and kind != "decoder" else 0
    sides = [side for side in HAN_SIDES if s.han_weights(side) is not None]
    head_width = max(3.0, CELL * len(cols) + 1.2)
    han_widths = [max(2.5, CELL * (s.han_weights(side)[0].shape[-1] + 1) + 2.0) for side in sides]
    n_rows = max([len(rows)] + [len(han_rows(s, side, words)) for side in sides])
    size = (head_width * cols_grid + sum(han_widths) + 0.8, max(2.5, CELL * (n_rows + arcs) + 1.2) * grid_rows)
    ratios = [head_width] * cols_grid + han_widths
    fig, grid = plt.subplots(grid_rows, cols_grid + len(sides), figsize=size, squeeze=False, gridspec_kw={"width_ratios": ratios})
    axes = grid[:, :cols_grid]
    for n, side in enumerate(sides):  # HAN's weights over the previous sentences: a panel of their own per block, beside the first row
        han_panel(grid[0, cols_grid + n], s, words, side=side)
        for ax in grid[1:, cols_grid + n]:
            ax.axis("off")
    image = None
    for k, ax in enumerate(axes.flat):
        if k >= len(heads):
            ax.axis("off")
            continue
        image = heatmap(ax, s, kind, layer, heads[k], words, links, labels=True)
        ax.set_title(f"{kind} layer {layer} head {heads[k]}", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    right = 1 - 0.8 / size[0]  # room for the colour bar
    with warnings.catch_warnings():  # long token labels can leave tight_layout no room: the figure is still right
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(rect=(0, 0, right, 0.97 if title else 1))
    bar = fig.colorbar(image, cax=fig.add_axes((right + 0.15 * (1 - right), 0.25, 0.2 * (1 - right), 0.5)))
    bar.set_label("attention weight", fontsize=9)
    bar.ax.tick_params(labelsize=8)
    return fig


# ---------------------------------------------------------------- the layer x head figure


def panel(ax, values: np.ndarray, title: str, fmt: str, vmax: float | None, marks: set[tuple[int, int]] = frozenset()) -> None:
    ax.imshow(values, cmap="viridis", vmin=0.0, vmax=vmax if vmax else max(float(np.nanmax(values)), 1e-9), aspect="equal")
    for (layer, head), v in np.ndenumerate(values):
        text = "–" if v != v else fmt.format(v)
        ax.text(head, layer, text + ("*" if (layer, head) in marks else ""), ha="center", va="center", fontsize=7, color="white" if v == v and v < 0.6 * (vmax or np.nanmax(values)) else "black")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)


# ---------------------------------------------------------------- the command


def output_paths(out: str | Path, lines: Sequence[int]) -> list[Path]:
    """``out`` for one sentence; ``stem-LINE.suffix`` for each of several."""
    out = Path(out)
    figure_format(out)
    if len(lines) == 1:
        return [out]
    return [out.with_name(f"{out.stem}-{line}{out.suffix}") for line in lines]


def plot_sentences(sentences: Sequence[SentenceAttention], lines: Sequence[int], out: str | Path, *, kind: str, layer: int, head: int | None, words: bool, alignments: dict[int, tuple[Links, Links]] | None = None) -> list[Path]:
    """One figure per sentence (``lines`` are their input line numbers, for names and alignments)."""
    paths = output_paths(out, lines)
    for s, line, path in zip(sentences, lines, paths):
        links = alignments.get(line) if alignments else None
        fig = attention_figure(s, kind, layer, head, words, links, title=f"line {line}: {s.source}")
        save_figure(fig, path)
    return paths


def load_for_plot(
    *, attention: str | None, checkpoint: str | None, src: str | None, ref: str | None, conllu: str | None, parse: bool, beam: int | None, sentences: str | None, device, docs: str | None = None
) -> tuple[list[SentenceAttention], list[int]]:
    """The selected sentences (input line numbers ``sentences``) from an export or computed by a checkpoint
    (its translations searched with ``beam``; None: the checkpoint's ``decode.beam_size``, as ``translate``)."""
    if bool(attention) == bool(checkpoint):
        raise UserError("give an attention export (-a OUT) or a --checkpoint with -i SRC")
    if attention and docs:
        raise UserError("--docs goes with --checkpoint and -i SRC (an export holds the context it was computed with)")
    if attention:
        header, exported = read_attention(attention)
        lines = header.get("lines") or list(range(len(exported)))
        position = {line: k for k, line in enumerate(lines)}
        wanted = parse_selection(sentences, max(lines, default=-1) + 1)
        missing = [line for line in wanted if line not in position]
        if missing:
            raise UserError(f"{attention}: line {missing[0]} is not in the export (it holds lines {', '.join(map(str, lines[:10]))}{' ...' if len(lines) > 10 else ''})")
        return [exported[position[line]] for line in wanted], wanted
    if not src:
        raise UserError("--checkpoint needs the source sentences: -i SRC")

    model, cfg, toks = load_model(checkpoint, device)
    beam = beam or cfg.decode.beam_size
    lines, refs, parses, keep = read_inputs(src, ref, conllu, sentences)
    contexts = read_contexts(model, cfg, toks, src, docs, keep, ref, device=device, beam=beam)
    got = attention_for_sentences(model, cfg, toks, lines, refs=refs, device=device, beam=beam, parse=parse, source_name=src, parses=parses, contexts=contexts)
    return got, keep


def read_link_file(path: str | None, one_indexed: bool, lines: Sequence[int]) -> dict[int, tuple[Links, Links]] | None:
    """The (sure, possible) word links of the given input lines from a Pharaoh file."""
    if not path:
        return None

    alignments = read_alignments(path, one_indexed)
    if max(lines, default=-1) >= len(alignments):
        raise UserError(f"{path} has {len(alignments)} lines: no alignment for input line {max(lines)}")
    return {line: alignments[line] for line in lines}
