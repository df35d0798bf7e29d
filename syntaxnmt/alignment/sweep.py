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

from syntaxnmt.alignment.extract import AttentionReading, attention_shape, encode_pairs, model_alignments, readings_alignments
from syntaxnmt.alignment.symmetrize import symmetrization
from syntaxnmt.alignment.symmetrize import symmetrize as symmetrize_links
from syntaxnmt.config import Config
from syntaxnmt.data.corpus import read_parallel
from syntaxnmt.data.links import AERResult, aer, format_links, read_alignments, transposed
from syntaxnmt.data.prepare import model_words
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.errors import UserError
from syntaxnmt.textio import write_lines


def sweep_readings(model) -> list[AttentionReading]:
    """Every layer x head, each layer averaged, all averaged, and a model's full-context pass
    (``train.alignment.full_context``: each head and their average); for a leaky model
    (``train.alignment.leaky``) the heads of the leak's pass that have the leak slot again with the
    leak read as the null word (:meth:`AttentionReading.null_share`, :func:`leak_heads`); unshifted,
    then the same shifted."""
    n_layers, n_heads = attention_shape(model)
    plain = [AttentionReading(layer, head) for layer in range(n_layers) for head in [*range(n_heads), None]]
    plain.append(AttentionReading(None, None))
    ap = getattr(model, "alignment_pass", None)
    if ap is not None and ap.full_context:
        plain += [AttentionReading(ap.layer, head, full_context=True) for head in [*range(n_heads), None]]
    if ap is not None and ap.leaky:
        plain += [AttentionReading(ap.layer, head, full_context=ap.full_context, null=True) for head in leak_heads(model, n_heads)]
    return plain + [AttentionReading(r.layer, r.head, True, r.full_context, r.null) for r in plain]


def leak_heads(model, n_heads: int) -> list[int | None]:
    """The heads read with the leak as null: those of the supervised layer that have the leak slot
    (``train.alignment.head``, or every head with ``average``), and their average when every head
    has one. A head without the slot has no null share: its "leak as null" row would be its plain one."""
    slot = model.decoder[model.alignment_pass.layer].cross_attn.leak
    heads = [h for h in range(n_heads) if bool(slot.heads[h])]
    return [*heads, None] if len(heads) == n_heads else heads


@dataclass
class SweepResult:
    """AER, precision and recall of every reading, in the order of :func:`sweep_readings`."""

    rows: list[tuple[AttentionReading, AERResult]]
    sentences: int
    leaky: bool = False
    """The model has a leak slot (``train.alignment.leaky``): ``align`` reads it as null unless told ``--no-null``."""

    def best(self, shift: bool | None = None) -> tuple[AttentionReading, AERResult]:
        """The reading with the lowest AER (the first on ties), among the shifted or unshifted ones when ``shift`` is given."""
        rows = [row for row in self.rows if shift is None or row[0].shift == shift]
        return min(rows, key=lambda row: row[1].aer)

    def table(self) -> str:
        """A Markdown table: one row per layer/head, the unshifted and shifted reading side by side, and the best readings named."""
        by_key = {(r.layer, r.head, r.full_context, r.null, r.shift): res for r, res in self.rows}
        lines = [
            f"AER / precision / recall (%) of argmax links against the gold alignments, {self.sentences} sentence pairs",
            "",
            "| layer | head | AER | precision | recall | shifted AER | shifted precision | shifted recall |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r, res in self.rows:
            if r.shift:
                continue
            shifted = by_key[(r.layer, r.head, r.full_context, r.null, True)]
            cells = ["average" if r.layer is None else f"{r.layer}" + (" (full context)" if r.full_context else "") + (" (leak as null)" if r.null else ""), "average" if r.head is None else str(r.head)]
            cells += [f"{100 * x:.2f}" for x in (res.aer, res.precision, res.recall, shifted.aer, shifted.precision, shifted.recall)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for name, shift in (("best unshifted", False), ("best shifted", True), ("best", None)):
            r, res = self.best(shift)
            lines.append(f"{name}: {r.label} ({_options(r, self.leaky)}): {res}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """Every reading's figures (fractions), and the best one."""

        def row(r: AttentionReading, res: AERResult) -> dict:
            return {"layer": r.layer, "head": r.head, "shift": r.shift, "full_context": r.full_context, "null": r.null, "label": r.label, "options": _options(r, self.leaky), "aer": res.aer, "precision": res.precision, "recall": res.recall}

        return {"sentences": self.sentences, "readings": [row(*x) for x in self.rows], "best": row(*self.best()), "best_unshifted": row(*self.best(False)), "best_shifted": row(*self.best(True))}


def _options(r: AttentionReading, leaky: bool = False) -> str:
    """The ``syntaxnmt align`` options of a reading (the full-context pass, and a leaky model's
    supervised pass with the leak as null, are what ``align`` reads without ``--layer``)."""
    layer = "" if r.full_context or r.null else "--layer " + ("average" if r.layer is None else str(r.layer)) + " "
    head = "average" if r.head is None else r.head
    no_null = " --no-null" if leaky and r.full_context and not r.null else ""
    return f"{layer}--head {head}" + (" --shift" if r.shift else "") + no_null


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
    transpose_gold: bool = False,
) -> SweepResult:
    """AER of every reading of :func:`sweep_readings` of the model ``checkpoint`` on the line pairs,
    against the Pharaoh file ``gold`` (one line per pair, links over the pairs' whitespace tokens;
    possible links ``ipj`` count as possible). The model force-decodes every batch once.
    ``transpose_gold``: ``gold`` links ``tgt_lines``' words to ``src_lines``' (a target->source
    model swept on the source->target gold file, for :func:`self_training_alignments`)."""
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{len(src_lines)} source lines but {len(tgt_lines)} target lines: the files must be line-aligned")
    model, cfg, toks = load_model(checkpoint, device)
    source, target, annotations = encode_pairs(model, cfg, toks, src_lines, tgt_lines, normalize, src_conllu)
    src_lengths = [len((toks.src.normalize(line) if normalize else line).split()) for line in src_lines]
    tgt_lengths = [len((toks.tgt.normalize(line) if normalize else line).split()) for line in tgt_lines]
    if transpose_gold:
        reference = [(transposed(s), transposed(p)) for s, p in read_alignments(gold, one_indexed_gold, tgt_lengths, src_lengths)]
    else:
        reference = read_alignments(gold, one_indexed_gold, src_lengths, tgt_lengths)
    if not reference:
        raise UserError(f"{gold}: no sentence pairs to score")
    readings = sweep_readings(model)
    links = readings_alignments(model, source, target, device, readings, method=method, threshold=threshold, batch_size=batch_size, annotations=annotations)
    sure, possible = [s for s, _ in reference], [p for _, p in reference]
    leaky = bool(getattr(getattr(model, "alignment_pass", None), "leaky", False))
    return SweepResult([(r, aer(sure, possible, hyp)) for r, hyp in zip(readings, links)], len(reference), leaky)


def reading_options(r: AttentionReading) -> dict:
    """The ``layer``/``head``/``shift``/``null`` arguments of :func:`syntaxnmt.alignment.extract.model_alignments`
    that read ``r`` (a full-context reading, or one of the leak as null: no layer, as ``align``
    reads the supervised pass)."""
    layer = None if r.full_context or r.null else ("average" if r.layer is None else r.layer)
    return {"layer": layer, "head": "average" if r.head is None else r.head, "shift": r.shift, "null": r.null}


TEACHER_READINGS: dict[str, bool | None] = {"best": None, "shifted": True, "unshifted": False}
"""The teacher readings of :func:`self_training_alignments` (the ``shift`` of :meth:`SweepResult.best`)."""


def self_training_alignments(
    cfg: Config,
    forward: str | Path,
    reverse: str | Path,
    dev: tuple[Sequence[str], Sequence[str], str | Path, bool],
    output: str | Path,
    device: torch.device,
    *,
    symmetrize: str = "grow-diag-final-and",
    reading: str = "best",
    batch_size: int = 64,
    log=print,
) -> dict:
    """Guidance for self-training (Zenkel et al. 2020; Chen et al. 2020, Shift-AET): a model's own
    symmetrized Shift-Att alignments of the training corpus of ``cfg``, written to ``output`` in the
    layout of ``align-external`` (one line per line of ``data.train_src``, empty for pairs
    ``prepare`` drops), so it loads as ``data.train_align``.

    ``forward``/``reverse``: source->target and target->source checkpoints (the reverse one
    trained on the swapped sides). Each direction is read with its teacher reading, chosen by
    :func:`align_sweep` on ``dev = (src lines, tgt lines, gold Pharaoh file, one-indexed)``
    (source->target gold; transposed for the reverse model): with ``reading`` ``best`` the better
    by dev AER of the best unshifted and the best shifted reading (Shift-Att; a small model's
    attention may already align at the predicting step, and its shifted reading is then off by
    one), with ``shifted``/``unshifted`` the best of those only. The two directions are symmetrized
    (``symmetrize``, grow-diag-final-and by default). Returns the chosen readings and their dev AER.
    """
    if reading not in TEACHER_READINGS:
        raise UserError(f"self-training teacher reading '{reading}': choose from {', '.join(TEACHER_READINGS)}")
    d = cfg.data
    if d.annotate != "none":
        raise UserError("self-training alignments read the training text's own words: not for a config with data.annotate")
    dev_src, dev_tgt, gold, one_indexed = dev
    chosen, links = {}, {}
    text = read_parallel(d.train_src, d.train_tgt)
    src_text, tgt_text = model_words(cfg, text, None)
    for name, path, dev_pair, train_pair in (("forward", forward, (dev_src, dev_tgt), (src_text, tgt_text)), ("reverse", reverse, (dev_tgt, dev_src), (tgt_text, src_text))):
        sweep = align_sweep(path, *dev_pair, gold, device, one_indexed_gold=one_indexed, batch_size=batch_size, transpose_gold=name == "reverse")
        teacher, result = sweep.best(TEACHER_READINGS[reading])
        kind = "shifted" if teacher.shift else "unshifted"
        chosen[name] = {"reading": teacher.label, "shift": teacher.shift, "options": _options(teacher), "dev_aer": result.aer, "dev_precision": result.precision, "dev_recall": result.recall}
        if reading == "best":
            other = sweep.best(not teacher.shift)[1]
            log(f"self-training labels, {name} model {path}: the best {kind} reading {teacher.label} (dev {result}; best {'unshifted' if teacher.shift else 'shifted'}: AER {100 * other.aer:.2f})")
        else:
            log(f"self-training labels, {name} model {path}: the best {kind} reading {teacher.label} (dev {result}; reading: {reading})")
        links[name] = model_alignments(path, *train_pair, device, batch_size=batch_size, **reading_options(teacher))
    fwd, rev = links["forward"], links["reverse"]
    method = symmetrization(symmetrize)
    lines = [""] * text.counts["read"]
    for line_number, f, r in zip(text.line_numbers, fwd, rev):
        lines[line_number - 1] = format_links(symmetrize_links(f, transposed(r), method))
    write_lines(output, lines)
    log(f"self-training alignments of {len(src_text)} pairs ({method}) written to {output}")
    return chosen
