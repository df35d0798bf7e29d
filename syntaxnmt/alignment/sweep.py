"""`syntaxnmt align-sweep`: AER of every reading of a model's cross-attention (layer x head, averages, shifted or not) from one force-decoding pass.

The readings: each decoder layer x head, each layer's heads averaged and everything averaged, each
read at the step that predicts the target word and shifted (Shift-Att, the step where it is the
decoder input). Which one aligns best differs from model to model: choose it on held-out gold
alignments (a dev split), then read it on the test split with
``syntaxnmt align --layer L --head H [--shift]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from syntaxnmt.alignment.extract import AttentionReading, attention_shape, encode_pairs, readings_alignments
from syntaxnmt.data.links import AERResult, aer, read_alignments
from syntaxnmt.decoding.translate import load_model
from syntaxnmt.errors import UserError


def sweep_readings(model) -> list[AttentionReading]:
    """Every layer x head, each layer averaged, all averaged, and a model's full-context pass
    (``train.alignment.full_context``: each head and their average); unshifted, then the same shifted."""
    n_layers, n_heads = attention_shape(model)
    plain = [AttentionReading(layer, head) for layer in range(n_layers) for head in [*range(n_heads), None]]
    plain.append(AttentionReading(None, None))
    ap = getattr(model, "alignment_pass", None)
    if ap is not None and ap.full_context:
        plain += [AttentionReading(ap.layer, head, full_context=True) for head in [*range(n_heads), None]]
    return plain + [AttentionReading(r.layer, r.head, True, r.full_context) for r in plain]


@dataclass
class SweepResult:
    """AER, precision and recall of every reading, in the order of :func:`sweep_readings`."""

    rows: list[tuple[AttentionReading, AERResult]]
    sentences: int

    def best(self, shift: bool | None = None) -> tuple[AttentionReading, AERResult]:
        """The reading with the lowest AER (the first on ties), among the shifted or unshifted ones when ``shift`` is given."""
        rows = [row for row in self.rows if shift is None or row[0].shift == shift]
        return min(rows, key=lambda row: row[1].aer)

    def table(self) -> str:
        """A Markdown table: one row per layer/head, the unshifted and shifted reading side by side, and the best readings named."""
        by_key = {(r.layer, r.head, r.full_context, r.shift): res for r, res in self.rows}
        lines = [
            f"AER / precision / recall (%) of argmax links against the gold alignments, {self.sentences} sentence pairs",
            "",
            "| layer | head | AER | precision | recall | shifted AER | shifted precision | shifted recall |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r, res in self.rows:
            if r.shift:
                continue
            shifted = by_key[(r.layer, r.head, r.full_context, True)]
            cells = ["average" if r.layer is None else f"{r.layer}" + (" (full context)" if r.full_context else ""), "average" if r.head is None else str(r.head)]
            cells += [f"{100 * x:.2f}" for x in (res.aer, res.precision, res.recall, shifted.aer, shifted.precision, shifted.recall)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for name, shift in (("best unshifted", False), ("best shifted", True), ("best", None)):
            r, res = self.best(shift)
            lines.append(f"{name}: {r.label} ({_options(r)}): {res}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """Every reading's figures (fractions), and the best one."""

        def row(r: AttentionReading, res: AERResult) -> dict:
            return {"layer": r.layer, "head": r.head, "shift": r.shift, "full_context": r.full_context, "label": r.label, "options": _options(r), "aer": res.aer, "precision": res.precision, "recall": res.recall}

        return {"sentences": self.sentences, "readings": [row(*x) for x in self.rows], "best": row(*self.best()), "best_unshifted": row(*self.best(False)), "best_shifted": row(*self.best(True))}


def _options(r: AttentionReading) -> str:
    """The ``syntaxnmt align`` options of a reading (the full-context pass is what ``align`` reads without ``--layer``)."""
    layer = "" if r.full_context else "--layer " + ("average" if r.layer is None else str(r.layer)) + " "
    head = "average" if r.head is None else r.head
    return f"{layer}--head {head}" + (" --shift" if r.shift else "")


def align_sweep(
    checkpoint: str | Path,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    gold: str | Path,
    device: torch.device,
    *,
    one_indexed_gold: bool = False,
    method: str = "argmax",
    threshold: float = 0.5,
    normalize: bool = False,
    batch_size: int = 64,
    src_conllu: str | None = None,
) -> SweepResult:
    """AER of every reading of :func:`sweep_readings` of the model ``checkpoint`` on the line pairs,
    against the Pharaoh file ``gold`` (one line per pair, links over the pairs' whitespace tokens;
    possible links ``ipj`` count as possible). The model force-decodes every batch once."""
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{len(src_lines)} source lines but {len(tgt_lines)} target lines: the files must be line-aligned")
    model, cfg, toks = load_model(checkpoint, device)
    source, target, annotations = encode_pairs(model, cfg, toks, src_lines, tgt_lines, normalize, src_conllu)
    src_lengths = [len((toks.src.normalize(line) if normalize else line).split()) for line in src_lines]
    tgt_lengths = [len((toks.tgt.normalize(line) if normalize else line).split()) for line in tgt_lines]
    reference = read_alignments(gold, one_indexed_gold, src_lengths, tgt_lengths)
    if not reference:
        raise UserError(f"{gold}: no sentence pairs to score")
    readings = sweep_readings(model)
    links = readings_alignments(model, source, target, device, readings, method=method, threshold=threshold, batch_size=batch_size, annotations=annotations)
    sure, possible = [s for s, _ in reference], [p for _, p in reference]
    return SweepResult([(r, aer(sure, possible, hyp)) for r, hyp in zip(readings, links)], len(reference))
