"""What every attention head attends to, measured against the source dependency trees
(``syntaxnmt analyze-heads``), in the manner of Clark et al. (2019), Raganato & Tiedemann (2018)
and Voita et al. (2019).

Encoder self-attention, per layer and head, at the word level (:func:`~.export.word_level`:
pieces of a word summed as keys, averaged as queries), ``</s>`` left out as query and as key:

* **relation shares**: for every word, the word its attention is highest on (argmax, first on
  ties); the share of words whose argmax is its **parent** (over non-root words), one of its
  **children** (over words with children), **itself** (all words; at the word level this is its
  own pieces), its **left** / **right** neighbour (over words that have one). A word may have
  several relations to one target (a parent can be the left neighbour): shares are independent.
* **per dependency label**, both directions: ``dep->head`` is the share of words with label L
  whose argmax is their parent (Clark et al. 2019, Sec. 4.2), ``head->dep`` the share of L-edges
  whose head word's argmax is that dependent. The best head of each label is compared with the
  best **fixed offset** (the parent is always the word k positions away), Clark et al.'s baseline.
* ``</s>`` weight: the mean attention mass a word puts on ``</s>`` (Clark et al. 2019, Sec. 3);
  **entropy** (bits) of every piece's distribution, averaged over pieces (``</s>`` included).

Cross-attention, per decoder layer and head: entropy, and with gold word alignments the AER of
the argmax links read as ``syntaxnmt align --layer L --head H`` reads them (piece-level argmax,
``</s>`` excluded, projected to words), plus the average of all layers and heads.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

from syntaxnmt.alignment.extract import alignment_from_attention
from syntaxnmt.analysis.export import SentenceAttention, attention_for_sentences, model_info, read_inputs, word_units
from syntaxnmt.analysis.plot import panel, pyplot, save_figure
from syntaxnmt.data.links import Links, aer, read_alignments, subwords_to_words
from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.sources import source_parses
from syntaxnmt.errors import UserError
from syntaxnmt.model.syntax_attention import layer_row
from syntaxnmt.textio import atomic_write_text

RELATIONS = ("parent", "child", "self", "left", "right")
DIRECTIONS = ("dep->head", "head->dep")
OFFSETS = range(-4, 5)


def entropy_bits(weights: np.ndarray) -> np.ndarray:
    """Entropy (bits) of every row of (..., Q, K) attention, summed over rows: (...,)."""
    w = np.asarray(weights, dtype=np.float64)
    return -(w * np.log2(np.where(w > 0, w, 1.0))).sum(-1).sum(-1)


def word_attention(s: SentenceAttention) -> tuple[np.ndarray, np.ndarray]:
    """Word-to-word encoder attention (L, H, n, n) without ``</s>``, and the weight on ``</s>`` (L, H, n)."""
    w = s.word_level("encoder")
    _, unit_words = word_units(s.src_word_of_piece)
    words = np.flatnonzero(unit_words >= 0)
    words = words[np.argsort(unit_words[words])]
    eos = np.flatnonzero(unit_words < 0)
    on_eos = w[..., words[:, None], eos[None, :]].sum(-1) if len(eos) else np.zeros(w.shape[:2] + (len(words),))
    return w[..., words[:, None], words[None, :]], on_eos


@dataclass
class TreeFacts:
    """The relations of one parsed sentence that the analysis counts (0-based word indices)."""

    parent: np.ndarray  # (n,), -1 for a root
    is_child: np.ndarray  # (n, n): is_child[i, j] = j is a child of i
    deprel: list[str]

    @classmethod
    def from_parse(cls, heads: Sequence[int], deprel: Sequence[str]) -> "TreeFacts":
        parent = np.asarray(heads, dtype=np.int64) - 1
        n = len(parent)
        is_child = np.zeros((n, n), dtype=bool)
        deps = np.flatnonzero(parent >= 0)
        is_child[parent[deps], deps] = True
        return cls(parent, is_child, list(deprel))


@dataclass
class EncoderStats:
    """Counts of the encoder analysis, accumulated sentence by sentence."""

    layers: int
    heads: int
    hits: dict[str, np.ndarray] = field(default_factory=dict)  # relation -> (L, H)
    eligible: Counter = field(default_factory=Counter)  # relation -> number of words
    chance: Counter = field(default_factory=Counter)  # relation -> expected hits of a uniformly random argmax
    label_hits: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (direction, label) -> (L, H)
    label_n: Counter = field(default_factory=Counter)  # label -> edges
    offsets: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # label -> parent-minus-dependent offsets
    eos: np.ndarray | None = None
    entropy: np.ndarray | None = None
    words: int = 0
    pieces: int = 0

    def __post_init__(self):
        shape = (self.layers, self.heads)
        self.hits = {r: np.zeros(shape, dtype=np.int64) for r in RELATIONS}
        self.eos, self.entropy = np.zeros(shape), np.zeros(shape)

    def _label(self, direction: str, label: str) -> np.ndarray:
        return self.label_hits.setdefault((direction, label), np.zeros((self.layers, self.heads), dtype=np.int64))

    def add(self, s: SentenceAttention) -> None:
        """Count one sentence (it must carry its parse)."""
        if s.parse is None:
            raise UserError(f"sentence {s.source!r} has no parse: analyze-heads needs parsed sources")
        attn, on_eos = word_attention(s)
        tree = TreeFacts.from_parse(s.parse.heads, s.parse.deprel)
        n = len(tree.parent)
        if attn.shape[-1] != n:
            raise UserError(f"sentence {s.source!r}: {n} words in the parse but {attn.shape[-1]} in the attention")
        top = attn.argmax(-1)  # (L, H, n)
        idx = np.arange(n)
        deps = np.flatnonzero(tree.parent >= 0)
        with_children = np.flatnonzero(tree.is_child.any(1))
        self.hits["parent"] += (top[..., deps] == tree.parent[deps]).sum(-1)
        self.hits["child"] += tree.is_child[with_children[None, None, :], top[..., with_children]].sum(-1)
        self.hits["self"] += (top == idx).sum(-1)
        self.hits["left"] += (top[..., 1:] == idx[1:] - 1).sum(-1)
        self.hits["right"] += (top[..., :-1] == idx[:-1] + 1).sum(-1)
        self.eligible.update({"parent": len(deps), "child": len(with_children), "self": n, "left": n - 1, "right": n - 1})
        self.chance.update({"parent": len(deps) / n, "child": len(deps) / n, "self": 1.0, "left": (n - 1) / n, "right": (n - 1) / n})
        for j in deps:
            label, p = tree.deprel[j], tree.parent[j]
            self.label_n[label] += 1
            self.offsets[label][int(p - j)] += 1
            self._label("dep->head", label)[...] += top[..., j] == p
            self._label("head->dep", label)[...] += top[..., p] == j
        self.eos += on_eos.sum(-1)
        self.entropy += entropy_bits(s.encoder)
        self.words += n
        self.pieces += s.encoder.shape[-2]

    def shares(self) -> dict[str, np.ndarray]:
        """Relation -> (L, H) share of eligible words (NaN when none is eligible)."""
        return {r: self.hits[r] / self.eligible[r] if self.eligible[r] else np.full(self.hits[r].shape, np.nan) for r in RELATIONS}

    def chance_shares(self) -> dict[str, float]:
        """Relation -> the share a head whose argmax were a uniformly random word would get."""
        return {r: self.chance[r] / self.eligible[r] if self.eligible[r] else float("nan") for r in RELATIONS}

    def best_offset(self, label: str) -> tuple[int, float]:
        """The fixed offset (parent position minus dependent position) right most often for ``label``, and its accuracy."""
        counts = self.offsets[label]
        offset, hits = max(counts.items(), key=lambda kv: (kv[1], -abs(kv[0])))
        return offset, hits / self.label_n[label]


@dataclass
class CrossStats:
    """Entropy and alignment links of the cross-attention heads, accumulated sentence by sentence."""

    layers: int
    heads: int
    entropy: np.ndarray | None = None
    rows: int = 0
    links: dict[tuple[int, int] | str, list[Links]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self):
        self.entropy = np.zeros((self.layers, self.heads))

    def add(self, s: SentenceAttention, with_links: bool) -> None:
        self.entropy += entropy_bits(s.cross)
        self.rows += s.cross.shape[-2]
        if not with_links:
            return
        src_w, tgt_w = s.src_word_of_piece[:-1], s.tgt_word_of_piece[:-1]
        t, k = len(tgt_w), len(src_w)
        for layer in range(self.layers):
            for head in range(self.heads):
                links = alignment_from_attention(s.cross[layer, head, :t, :k])
                self.links[(layer, head)].append(subwords_to_words(links, src_w, tgt_w))
        self.links["average"].append(subwords_to_words(alignment_from_attention(s.cross.mean((0, 1))[:t, :k]), src_w, tgt_w))


@dataclass
class HeadAnalysis:
    """The whole analysis of one model on one corpus."""

    info: dict
    sentences: int
    encoder: EncoderStats | None
    cross: CrossStats
    aer: dict | None = None  # (layer, head) | "average" -> AERResult


def new_analysis(info: dict) -> HeadAnalysis:
    enc = EncoderStats(info["encoder_layers"], info["heads"]) if info["arch"] == "transformer" else None
    return HeadAnalysis(info, 0, enc, CrossStats(info["decoder_layers"], info["heads"]))


def add_sentences(analysis: HeadAnalysis, sentences: Iterable[SentenceAttention], with_links: bool = False) -> None:
    for s in sentences:
        if analysis.encoder is not None:
            analysis.encoder.add(s)
        analysis.cross.add(s, with_links)
        analysis.sentences += 1


def finish_aer(analysis: HeadAnalysis, gold: Sequence[tuple[Links, Links]]) -> None:
    """AER of every cross-attention head's links against ``gold`` (sure, possible) per sentence."""
    sure, possible = [g[0] for g in gold], [g[1] for g in gold]
    analysis.aer = {key: aer(sure, possible, hyps) for key, hyps in analysis.cross.links.items()}


# ---------------------------------------------------------------- which heads are enriched


def enriched_heads(info: dict) -> dict[tuple[int, int], str]:
    """(layer, head) -> what model.syntax does to that encoder head ("tree_distance", "parent-scaled",
    ...) and what multi-task learning does to it: "LISA-supervised" (trained to attend to the parent)
    or "injected parse" (``lisa.inject_parse``: its weights are the given parse's one-hot parent, not learned)."""
    syn, out = info.get("syntax") or {}, {}
    lisa = info.get("supervised_heads") or {}
    for layer in range(info.get("encoder_layers", 0)):
        marks: dict[int, list[str]] = defaultdict(list)
        for key, fmt in (("relations", "{}"), ("qk_source", "{} q/k"), ("parent_scaled", "parent-scaled")):
            row = layer_row(syn.get(key) or [], layer)
            for h, v in enumerate(row or []):
                if v and str(v).lower() not in ("none", "word"):
                    marks[h].append(fmt.format(v))
        if layer in lisa.get("layers", ()):
            for h in lisa.get("heads", ()):
                marks[h].append("injected parse" if lisa.get("inject_parse") else "LISA-supervised")
        out.update({(layer, h): ", ".join(m) for h, m in marks.items()})
    return out


def supervised_cross_head(info: dict) -> tuple[int, int | None] | None:
    """(layer, head or None = all heads) of the guided-alignment head, or None."""
    g = info.get("guided_alignment")
    if not g or g["layer"] == "average":
        return None
    layer = int(g["layer"]) % info["decoder_layers"]
    return layer, None if g["head"] == "average" else int(g["head"]) % info["heads"]


# ---------------------------------------------------------------- tables


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.1f}"


def heads_rows(a: HeadAnalysis) -> list[dict]:
    """One row per encoder (layer, head): enrichment, relation shares, </s> weight, entropy."""
    e = a.encoder
    if e is None:
        return []
    shares, marks = e.shares(), enriched_heads(a.info)
    rows = []
    for layer in range(e.layers):
        for head in range(e.heads):
            row = {"layer": layer, "head": head, "enriched": marks.get((layer, head), "")}
            row.update({r: shares[r][layer, head] for r in RELATIONS})
            row["eos"] = e.eos[layer, head] / max(e.words, 1)
            row["entropy"] = e.entropy[layer, head] / max(e.pieces, 1)
            rows.append(row)
    return rows


def label_rows(a: HeadAnalysis, min_count: int = 1) -> list[dict]:
    """One row per dependency label (most frequent first): the best head in each direction and the offset baseline."""
    e = a.encoder
    if e is None:
        return []
    rows = []
    for label, n in e.label_n.most_common():
        if n < min_count:
            continue
        row = {"label": label, "n": n}
        for d in DIRECTIONS:
            acc = e.label_hits[(d, label)] / n
            layer, head = np.unravel_index(int(acc.argmax()), acc.shape)
            row[d] = (int(layer), int(head), float(acc[layer, head]))
        row["offset"] = e.best_offset(label)
        rows.append(row)
    return rows


def cross_rows(a: HeadAnalysis) -> list[dict]:
    c, sup = a.cross, supervised_cross_head(a.info)
    rows = []
    for layer in range(c.layers):
        for head in range(c.heads):
            supervised = sup is not None and sup[0] == layer and sup[1] in (None, head)
            row = {"layer": layer, "head": head, "supervised": supervised, "entropy": c.entropy[layer, head] / max(c.rows, 1)}
            if a.aer:
                r = a.aer[(layer, head)]
                row.update(aer=r.aer, precision=r.precision, recall=r.recall)
            rows.append(row)
    return rows


def markdown_report(a: HeadAnalysis, title: str = "", max_labels: int = 15) -> str:
    """The Markdown tables of docs/attention.md (percentages)."""
    out = [f"### {title}\n" if title else ""]
    e = a.encoder
    out.append(f"{a.sentences} sentences" + (f", {e.words} words, {e.pieces} source pieces (</s> included)." if e else ".") + "\n")
    if e is not None:
        out.append("Encoder self-attention: share (%) of words whose most-attended word (</s> excluded) is the relation; </s>: mean weight on </s>; entropy in bits. "
                   "enriched: what model.syntax or multi-task learning does to the head (an injected parse head's weights are the given parse's one-hot parent, not learned).\n")
        out.append("| layer | head | enriched | parent | child | self | left | right | </s> | entropy |\n|---|---|---|---|---|---|---|---|---|---|")
        for r in heads_rows(a):
            cells = [str(r["layer"]), str(r["head"]), r["enriched"] or "–"] + [_pct(r[x]) for x in RELATIONS] + [_pct(r["eos"]), f"{r['entropy']:.2f}"]
            out.append("| " + " | ".join(cells) + " |")
        chance = e.chance_shares()
        out.append("| chance | | uniform argmax | " + " | ".join(_pct(chance[x]) for x in RELATIONS) + " | | |")
        out.append("\nPer dependency label: the best head (layer-head) and its accuracy (%) in each direction; baseline: the best fixed offset (parent position minus dependent position).\n")
        out.append("| label | n | dep→head: head | acc | head→dep: head | acc | offset baseline | acc |\n|---|---|---|---|---|---|---|---|")
        for r in label_rows(a)[:max_labels]:
            (l1, h1, a1), (l2, h2, a2), (off, ab) = r["dep->head"], r["head->dep"], r["offset"]
            out.append(f"| {r['label']} | {r['n']} | {l1}-{h1} | {_pct(a1)} | {l2}-{h2} | {_pct(a2)} | {off:+d} | {_pct(ab)} |")
    out.append("\nCross-attention" + (" (AER/precision/recall in % against the gold word alignments; argmax links, as `syntaxnmt align`)" if a.aer else "") + ":\n")
    columns = ["layer", "head", "supervised", "entropy"] + (["AER", "precision", "recall"] if a.aer else [])
    out.append("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for r in cross_rows(a):
        cells = [str(r["layer"]), str(r["head"]), "yes" if r["supervised"] else "–", f"{r['entropy']:.2f}"]
        if a.aer:
            cells += [_pct(r["aer"]), _pct(r["precision"]), _pct(r["recall"])]
        out.append("| " + " | ".join(cells) + " |")
    if a.aer:
        avg = a.aer["average"]
        out.append(f"| all | all (average) | – | – | {_pct(avg.aer)} | {_pct(avg.precision)} | {_pct(avg.recall)} |")
    return "\n".join(out) + "\n"


def _csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def csv_tables(a: HeadAnalysis) -> dict[str, str]:
    """``heads``, ``labels`` (every label x direction x layer x head) and ``cross`` CSV texts."""
    tables = {"cross": _csv(cross_rows(a), ["layer", "head", "supervised", "entropy", "aer", "precision", "recall"])}
    if a.encoder is None:
        return tables
    tables["heads"] = _csv(heads_rows(a), ["layer", "head", "enriched", *RELATIONS, "eos", "entropy"])
    e, long = a.encoder, []
    for (d, label), hits in sorted(e.label_hits.items()):
        for layer in range(e.layers):
            for head in range(e.heads):
                long.append({"label": label, "direction": d, "layer": layer, "head": head, "n": e.label_n[label], "hits": int(hits[layer, head]), "accuracy": hits[layer, head] / e.label_n[label]})
    tables["labels"] = _csv(long, ["label", "direction", "layer", "head", "n", "hits", "accuracy"])
    return tables


# ---------------------------------------------------------------- the command


def analyze_heads(
    checkpoint: str | Path,
    src: str,
    out: str | Path,
    *,
    ref: str | None = None,
    conllu: str | None = None,
    gold_align: str | None = None,
    one_indexed_gold: bool = False,
    sentences: str | None = None,
    beam: int | None = None,
    batch_size: int = 32,
    chunk: int = 256,
    title: str = "",
    device,
) -> tuple[HeadAnalysis, list[Path]]:
    """``syntaxnmt analyze-heads``: run the model over the corpus chunk by chunk, count, write
    ``OUT.md``, ``OUT-heads.csv``, ``OUT-labels.csv``, ``OUT-cross.csv`` and ``OUT.png``. Without
    ``ref`` the model's translations are analysed, searched with ``beam`` (None: the checkpoint's
    ``decode.beam_size``, as ``translate``, ``attention`` and ``plot``)."""


    if gold_align and not ref:
        raise UserError("--gold-align needs --ref: the gold links are between the source and its reference")
    model, cfg, toks = load_model(checkpoint, device)
    beam = beam or cfg.decode.beam_size
    lines, refs, parses, keep = read_inputs(src, ref, conllu, sentences)
    if parses is None:  # parse as the corpus was (spaCy), before any work
        parses = source_parses(cfg, lines, None, src, "the analysis needs source parses")
    gold = read_gold(gold_align, one_indexed_gold, keep, [len(p.words) for p in parses], [len(toks.tgt.normalize(r).split()) for r in refs]) if gold_align else None
    analysis = new_analysis({"checkpoint": str(checkpoint), **model_info(model, cfg)})
    with tqdm(total=len(lines), desc="analyze-heads", unit="sent") as bar:
        for start in range(0, len(lines), chunk):
            part = slice(start, start + chunk)
            got = attention_for_sentences(
                model, cfg, toks, lines[part], refs=refs[part] if refs else None, device=device, beam=beam, parse=True,
                batch_size=batch_size, source_name=src, parses=parses[part],
            )
            add_sentences(analysis, got, with_links=gold is not None)
            bar.update(len(got))
    if gold is not None:
        finish_aer(analysis, gold)
    return analysis, write_report(analysis, out, title)


def read_gold(path: str, one_indexed: bool, keep: Sequence[int], n_src: Sequence[int], n_tgt: Sequence[int]) -> list[tuple[Links, Links]]:
    """The gold (sure, possible) links of the selected lines ``keep``, checked against the sentences' word counts."""
    gold = read_alignments(path, one_indexed)
    if len(gold) <= max(keep, default=-1):
        raise UserError(f"{path} has {len(gold)} lines but the input has at least {max(keep) + 1}")
    out = [gold[i] for i in keep]
    for (sure, possible), s, t, line in zip(out, n_src, n_tgt, keep):
        for i, j in sure | possible:
            if i >= s or j >= t:
                raise UserError(f"{path}:{line + 1}: link {i}-{j} outside the sentence pair ({s} source words, {t} target words)")
    return out


def write_report(a: HeadAnalysis, out: str | Path, title: str = "") -> list[Path]:
    """Write the Markdown, the CSV tables and the layer x head figure; return their paths."""
    out = Path(out)
    out = out.with_suffix("") if out.suffix in (".md", ".png", ".csv") else out
    paths = [out.with_name(out.name + ".md")]
    atomic_write_text(paths[0], markdown_report(a, title))
    for name, text in csv_tables(a).items():
        paths.append(out.with_name(f"{out.name}-{name}.csv"))
        atomic_write_text(paths[-1], text)
    paths.append(out.with_name(out.name + ".png"))
    heads_figure(a, paths[-1], title)
    return paths


# ---------------------------------------------------------------- several models


def model_label(spec: str) -> tuple[str, str]:
    """``LABEL=PATH`` or ``PATH`` (labelled by its run folder for best.pt/last.pt, else its stem)."""
    label, sep, path = spec.partition("=")
    if sep and label and "/" not in label:
        return label, path
    p = Path(spec)
    return (p.parent.name if p.stem in ("best", "last") and p.parent.name else p.stem), spec


def _best(values: np.ndarray, marks: dict) -> str:
    if np.all(np.isnan(values)):
        return "–"
    layer, head = np.unravel_index(int(np.nanargmax(values)), values.shape)
    star = "*" if (int(layer), int(head)) in marks else ""
    return f"{_pct(float(values[layer, head]))} ({layer}-{head}{star})"


def comparison_rows(analyses: dict[str, HeadAnalysis]) -> list[dict]:
    """One row per model: the best encoder head per relation, mean entropy and </s> weight, cross AER."""
    rows = []
    for label, a in analyses.items():
        row = {"model": label, "sentences": a.sentences}
        e = a.encoder
        if e is not None:
            marks, shares = enriched_heads(a.info), e.shares()
            row.update({r: _best(shares[r], marks) for r in RELATIONS})
            row["entropy"] = f"{e.entropy.mean() / max(e.pieces, 1):.2f}"
            row["eos"] = _pct(e.eos.mean() / max(e.words, 1))
        row["cross entropy"] = f"{a.cross.entropy.mean() / max(a.cross.rows, 1):.2f}"
        if a.aer:
            aer = np.array([[a.aer[(layer, h)].aer for h in range(a.cross.heads)] for layer in range(a.cross.layers)])
            layer, head = np.unravel_index(int(aer.argmin()), aer.shape)
            row["best AER"] = f"{_pct(float(aer[layer, head]))} ({layer}-{head})"
            row["average AER"] = _pct(a.aer["average"].aer)
        rows.append(row)
    return rows


def comparison_markdown(analyses: dict[str, HeadAnalysis], max_labels: int = 10) -> str:
    """Models side by side: best head (layer-head, * = enriched) per relation, and per dependency label."""
    rows = comparison_rows(analyses)
    columns = [c for c in ["model", "sentences", *RELATIONS, "entropy", "eos", "cross entropy", "best AER", "average AER"] if any(c in r for r in rows)]
    names = {"eos": "</s>", "entropy": "entropy (bits)"}
    out = ["Best encoder head per relation: share (%) of words whose most-attended word is that relation, (layer-head, * = enriched by model.syntax, LISA-supervised or injected parse); entropy and </s> weight: means over all encoder heads.\n"]
    out.append("| " + " | ".join(names.get(c, c) for c in columns) + " |\n|" + "---|" * len(columns))
    out += ["| " + " | ".join(str(r.get(c, "–")) for c in columns) + " |" for r in rows]
    encoders = {k: a.encoder for k, a in analyses.items() if a.encoder is not None}
    if encoders:
        counts: Counter = Counter()
        for e in encoders.values():
            counts.update(e.label_n)
        out.append("\nPer dependency label, dep→head: accuracy (%) of the best head (layer-head, * = enriched); baseline: the best fixed offset.\n")
        out.append("| label | n | " + " | ".join(encoders) + " | offset baseline |\n|" + "---|" * (len(encoders) + 3))
        first = next(iter(encoders.values()))
        for label, _ in counts.most_common(max_labels):
            cells = []
            for k, e in encoders.items():
                n = e.label_n[label]
                cells.append(_best(e.label_hits[("dep->head", label)] / n, enriched_heads(analyses[k].info)) if n else "–")
            off = f"{_pct(first.best_offset(label)[1])} ({first.best_offset(label)[0]:+d})" if first.label_n[label] else "–"
            out.append(f"| {label} | {first.label_n[label] or counts[label]} | " + " | ".join(cells) + f" | {off} |")
    return "\n".join(out) + "\n"


def analyze_models(checkpoints: Sequence[str], src: str, out: str | Path, *, title: str = "", **kw) -> tuple[dict[str, HeadAnalysis], list[Path]]:
    """:func:`analyze_heads` for each ``LABEL=PATH`` (a report ``OUT-LABEL.*`` each), then the
    side-by-side ``OUT.md`` / ``OUT.csv``; with one checkpoint, just its report ``OUT.*``."""
    specs = [model_label(c) for c in checkpoints]
    labels = [label for label, _ in specs]
    if len(set(labels)) != len(labels):
        raise UserError(f"two checkpoints are labelled alike ({', '.join(labels)}): name them LABEL=PATH")
    if len(specs) == 1:
        analysis, paths = analyze_heads(specs[0][1], src, out, title=title, **kw)
        return {labels[0]: analysis}, paths
    out = Path(out)
    out = out.with_suffix("") if out.suffix in (".md", ".csv") else out
    analyses, paths = {}, []
    for label, path in specs:
        analyses[label], written = analyze_heads(path, src, out.with_name(f"{out.name}-{label}"), title=f"{label} — {title}" if title else label, **kw)
        paths += written
    summary = [out.with_name(out.name + ".md"), out.with_name(out.name + "-summary.csv")]
    atomic_write_text(summary[0], (f"### {title}\n\n" if title else "") + comparison_markdown(analyses))
    rows = comparison_rows(analyses)
    atomic_write_text(summary[1], _csv(rows, list(dict.fromkeys(k for r in rows for k in r))))
    return analyses, summary + paths


def heads_figure(analysis, path: str | Path, title: str = "") -> Path:
    """Layer x head panels: the relation shares (%) and entropy of the encoder heads, the entropy
    (and AER) of the cross-attention heads. ``*`` marks enriched / supervised heads."""
    plt = pyplot()
    panels = []
    e, c = analysis.encoder, analysis.cross
    if e is not None:
        marks = set(enriched_heads(analysis.info))
        shares = e.shares()
        panels += [(100 * shares[r], f"encoder: {r} %", "{:.0f}", 100.0, marks) for r in RELATIONS]
        panels.append((e.entropy / max(e.pieces, 1), "encoder: entropy (bits)", "{:.1f}", None, marks))
    sup = supervised_cross_head(analysis.info)
    cross_marks = {(sup[0], h) for h in range(c.heads) if sup[1] in (None, h)} if sup else set()
    panels.append((c.entropy / max(c.rows, 1), "cross: entropy (bits)", "{:.1f}", None, cross_marks))
    if analysis.aer:
        aer = np.array([[100 * analysis.aer[(layer, h)].aer for h in range(c.heads)] for layer in range(c.layers)])
        panels.append((aer, "cross: AER %", "{:.0f}", 100.0, cross_marks))
    n = len(panels)
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols + 0.4 * max(c.heads - 4, 0) * ncols, 2.2 * nrows), squeeze=False)
    for ax, spec in zip(axes.flat, panels):
        panel(ax, *spec)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95) if title else None)
    return save_figure(fig, path, dpi=90)
