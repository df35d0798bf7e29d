// syntaxnmt's page: translate a sentence with POST /translate (attention: true), then draw the
// source's dependency tree and a heatmap of one attention layer and head, as SVG; on request
// keep the sentence's inline tags (markup: true) and list the word alignment (alignments: true).
// "Required phrases" (separated by | or tabs) are sent as the sentence's constraints
// (constraints: [[phrases]]), and "use the term dictionary" as terminology: true.
// "lines as a document" sends the lines as one document ({"documents": [lines]}) and shows, per
// sentence, the context the model read: the previous sentences, its own translations of them
// (a target-side HAN model's context) and HAN's sentence-level weights on each, both sides.
// No libraries.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let current = null; // the attention record of the last translation
let documentRecords = null; // a document's attention records, one per line (null: an empty line)

// ------------------------------------------------------------------ SVG helpers

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function clear(svg) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
}

function textWidth(svg, text, cls) {
  const t = el("text", { class: cls, x: 0, y: 0 }, svg, text);
  const w = t.getComputedTextLength();
  svg.removeChild(t);
  return w;
}

// An arc from x1 to x2 standing on baseline y, peaking h above it (a cubic Bezier peaks at 3/4 h).
function arcPath(x1, x2, y, h) {
  return `M ${x1} ${y} C ${x1} ${y - h} ${x2} ${y - h} ${x2} ${y}`;
}

function arrowHead(parent, x, y, cls) {
  el("path", { class: cls, d: `M ${x - 4} ${y - 7} L ${x + 4} ${y - 7} L ${x} ${y} Z` }, parent);
}

// ------------------------------------------------------------------ dependency tree

// parse: {words, heads (1-based, 0 = root), deprel, upos}
function drawTree(svg, parse) {
  clear(svg);
  const n = parse.words.length;
  const gap = 26, left = 20, unit = 20;
  const widths = parse.words.map((w, i) =>
    Math.max(textWidth(svg, w, "word"), textWidth(svg, parse.upos ? parse.upos[i] : "", "tag")));
  const centers = [];
  let x = left;
  for (const w of widths) { centers.push(x + w / 2); x += w + gap; }
  const dist = parse.heads.map((h, i) => (h > 0 ? Math.abs(h - 1 - i) : 0));
  const top = 24 + unit * (Math.max(1, ...dist) + 1);
  const base = top;
  svg.setAttribute("width", Math.max(x + left, 200));
  svg.setAttribute("height", base + 50);
  const arcs = el("g", { class: "arcs" }, svg);
  parse.heads.forEach((head, i) => {
    const xd = centers[i];
    if (head === 0) {
      el("line", { class: "arc root", x1: xd, y1: 14, x2: xd, y2: base - 2 }, arcs);
      el("text", { class: "arc-label", x: xd + 4, y: 22 }, arcs, parse.deprel ? parse.deprel[i] : "root");
      arrowHead(arcs, xd, base - 2, "arrow");
      return;
    }
    const xh = centers[head - 1] + (head - 1 < i ? 4 : -4);
    const h = unit * (dist[i] + 1) * 4 / 3;
    el("path", { class: "arc", d: arcPath(xh, xd, base - 2, h) }, arcs);
    el("text", { class: "arc-label", x: (xh + xd) / 2, y: base - 2 - 0.75 * h - 3, "text-anchor": "middle" },
      arcs, parse.deprel ? parse.deprel[i] : "");
    arrowHead(arcs, xd, base - 2, "arrow");
  });
  parse.words.forEach((w, i) => {
    el("text", { class: "word", x: centers[i], y: base + 16, "text-anchor": "middle" }, svg, w);
    if (parse.upos) el("text", { class: "tag", x: centers[i], y: base + 32, "text-anchor": "middle" }, svg, parse.upos[i]);
  });
}

// ------------------------------------------------------------------ heatmap
// As `syntaxnmt plot` draws it: rows are queries, columns keys, colour from 0 to 1, and over
// source columns the dependency arcs of the source (head -> dependent, a triangle at the
// dependent, the label at the top).

const KINDS = {
  cross: { label: "cross-attention (target → source)", rows: "target", cols: "source" },
  encoder: { label: "encoder self-attention (source → source)", rows: "source", cols: "source" },
  decoder: { label: "decoder self-attention (decoder inputs → decoder inputs)", rows: "decoder_input", cols: "decoder_input" },
};

function matrixOf(att, kind, layer, head) {
  const heads = att[kind][layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, r) => row.map((_, c) => heads.reduce((s, m) => s + m[r][c], 0) / heads.length));
}

// Word units of one axis (Clark et al. 2019, as syntaxnmt.analysis.export.word_units): a word's
// consecutive pieces form one unit, a special token (word -1) is a unit of its own.
function units(side) {
  const unitOf = [], labels = [], wordOfUnit = [];
  side.word_of_piece.forEach((w, p) => {
    if (p === 0 || w < 0 || w !== side.word_of_piece[p - 1]) {
      labels.push(w >= 0 ? side.words[w] : side.pieces[p]);
      wordOfUnit.push(w);
    }
    unitOf.push(labels.length - 1);
  });
  return { unitOf, labels, wordOfUnit };
}

// Attention *to* a word is the sum over its pieces, *from* a word the mean over its pieces.
function toWords(m, rowUnits, colUnits) {
  const out = rowUnits.labels.map(() => colUnits.labels.map(() => 0));
  const count = rowUnits.labels.map(() => 0);
  rowUnits.unitOf.forEach((u) => { count[u] += 1; });
  m.forEach((row, r) => row.forEach((w, c) => {
    out[rowUnits.unitOf[r]][colUnits.unitOf[c]] += w / count[rowUnits.unitOf[r]];
  }));
  return out;
}

// Column position (in cells) of every source word: its unit, or the mean of its pieces.
function wordColumns(side, words) {
  const cols = {};
  if (words) {
    units(side).wordOfUnit.forEach((w, u) => { if (w >= 0) cols[w] = u + 0.5; });
    return cols;
  }
  const sum = {}, n = {};
  side.word_of_piece.forEach((w, p) => {
    if (w >= 0) { sum[w] = (sum[w] || 0) + p + 0.5; n[w] = (n[w] || 0) + 1; }
  });
  for (const w of Object.keys(sum)) cols[w] = sum[w] / n[w];
  return cols;
}

function heatmapData(att, kind, layer, head, words) {
  const spec = KINDS[kind];
  let m = matrixOf(att, kind, layer, head);
  let rows = att[spec.rows].pieces, cols = att[spec.cols].pieces;
  if (words) {
    const ru = units(att[spec.rows]), cu = units(att[spec.cols]);
    m = toWords(m, ru, cu);
    rows = ru.labels; cols = cu.labels;
  }
  return { spec, m, rows, cols };
}

const HEATMAP_CELL = 26; // px

function drawHeatmap(svg, att, kind, layer, head, words) {
  clear(svg);
  const { spec, m, rows, cols } = heatmapData(att, kind, layer, head, words);
  const cell = HEATMAP_CELL;
  const rowLabelW = Math.max(...rows.map((p) => textWidth(svg, p, "axis-label")), 10) + 10;
  const colLabelH = Math.max(...cols.map((p) => textWidth(svg, p, "axis-label")), 10) * 0.8 + 14;
  const tree = spec.cols === "source" ? sourceTree(att, words) : null;
  const arcs = tree ? layoutArcs(svg, tree) : [];
  const arcH = arcs.length ? ARC_BASE + ARC_STEP * Math.max(...arcs.map((a) => a.level)) + 16 : 0;
  const x0 = rowLabelW, y0 = arcH + colLabelH;
  svg.setAttribute("width", x0 + cell * cols.length + 20);
  svg.setAttribute("height", y0 + cell * rows.length + 10);
  const cells = el("g", { class: "cells" }, svg);
  m.forEach((row, r) => row.forEach((w, c) => {
    const t = Math.min(1, Math.max(0, w));
    const fill = `rgb(${Math.round(247 - 239 * t)}, ${Math.round(251 - 203 * t)}, ${Math.round(255 - 148 * t)})`;
    const rect = el("rect", { class: "cell", x: x0 + c * cell, y: y0 + r * cell, width: cell, height: cell, fill }, cells);
    el("title", {}, rect, `${rows[r]} → ${cols[c]}: ${w.toFixed(3)}`);
  }));
  rows.forEach((p, r) => el("text", { class: "axis-label", x: x0 - 6, y: y0 + r * cell + cell * 0.65, "text-anchor": "end" }, svg, p));
  cols.forEach((p, c) => {
    const x = x0 + c * cell + cell * 0.6, y = y0 - 6;
    el("text", { class: "axis-label", x, y, transform: `rotate(-50 ${x} ${y})` }, svg, p);
  });
  if (tree) drawTreeArcs(svg, tree, arcs, x0, arcH, cell);
  const max = Math.max(...m.flat());
  $("heatmap-note").textContent =
    `${spec.label}; rows: ${words ? "words" : "pieces"} of the ${spec.rows.replace("_", " ")}, columns: of the ${spec.cols.replace("_", " ")}; ` +
    `white 0, dark blue 1 (largest here ${max.toFixed(3)})` + (tree ? "; arcs: the source's dependency tree (head → dependent ▼)" : "");
}

// The source tree over the heatmap's columns, when the parse's words are the model's source words.
function sourceTree(att, words) {
  const parse = att.parse, src = att.source;
  if (!parse || !src.words || parse.words.length !== src.words.length) return null;
  if (parse.words.some((w, i) => w.toLowerCase() !== src.words[i].toLowerCase())) return null;
  const cols = wordColumns(src, words);
  if (parse.words.some((_, i) => cols[i] === undefined)) return null;
  return { parse, cols };
}

const ARC_BASE = 8, ARC_STEP = 15; // px: the lowest arc top, and the height between levels (a label's room)

// A level (1, 2, ...) for every arc over the heatmap: an arc stands above the arcs nested inside
// it, and an arc whose label would overlap a label of the same level moves up one level (the
// labels sit at the arcs' tops, centred), as `syntaxnmt plot` stacks them.
function layoutArcs(svg, tree) {
  const cell = HEATMAP_CELL;
  const arcs = [];
  tree.parse.heads.forEach((head, i) => {
    if (head === 0) return;
    const a = tree.cols[head - 1], b = tree.cols[i];
    arcs.push({ i, head, lo: Math.min(a, b), hi: Math.max(a, b), width: textWidth(svg, tree.parse.deprel[i], "heatmap-arc-label") + 4, level: 0 });
  });
  const placed = [];
  for (const arc of [...arcs].sort((x, y) => (x.hi - x.lo) - (y.hi - y.lo) || x.lo - y.lo)) {
    let level = 1 + Math.max(0, ...placed.filter((p) => arc.lo <= p.lo && p.hi <= arc.hi).map((p) => p.level));
    const centre = ((arc.lo + arc.hi) / 2) * cell;
    const clashes = (lv) => placed.some((p) => p.level === lv && Math.abs(((p.lo + p.hi) / 2) * cell - centre) < (p.width + arc.width) / 2);
    while (clashes(level)) level += 1;
    arc.level = level;
    placed.push(arc);
  }
  return arcs;
}

function drawTreeArcs(svg, tree, arcs, x0, base, cell) {
  const g = el("g", { class: "heatmap-arcs" }, svg);
  for (const { i, head, lo, hi, level } of arcs) {
    const xd = x0 + tree.cols[i] * cell, xh = x0 + tree.cols[head - 1] * cell;
    const top = ARC_BASE + ARC_STEP * (level - 1) + 6; // the arc's peak above the baseline
    const arc = el("path", { class: "heatmap-arc", d: arcPath(xh, xd, base - 2, top * 4 / 3) }, g);
    el("title", {}, arc, `${tree.parse.words[head - 1]} → ${tree.parse.words[i]} (${tree.parse.deprel[i]})`);
    arrowHead(g, xd, base - 2, "heatmap-arrow");
    el("text", { class: "heatmap-arc-label", x: x0 + ((lo + hi) / 2) * cell, y: base - 2 - top - 2, "text-anchor": "middle" }, g, tree.parse.deprel[i]);
  }
}

// ------------------------------------------------------------------ controls

function fillSelect(select, options, keep) {
  const old = select.value;
  select.innerHTML = "";
  for (const [value, label] of options) {
    const o = document.createElement("option");
    o.value = value; o.textContent = label;
    select.appendChild(o);
  }
  if (keep && options.some(([v]) => v === old)) select.value = old;
}

function setUpAttention(att) {
  const kinds = Object.keys(KINDS).filter((k) => att[k]);
  fillSelect($("kind"), kinds.map((k) => [k, KINDS[k].label]), true);
  updateLayerHead();
}

function updateLayerHead() {
  const att = current, kind = $("kind").value;
  const layers = att[kind].length, heads = att[kind][0].length;
  fillSelect($("layer"), [...Array(layers).keys()].map((l) => [String(l), `${l + 1} of ${layers}`]), true);
  if ($("layer").value === "" || !$("layer").dataset.touched) $("layer").value = String(layers - 1);
  fillSelect($("head"), [...[...Array(heads).keys()].map((h) => [String(h), `${h + 1}`]), ["mean", "mean of all"]], true);
  redraw();
}

function redraw() {
  if (!current) return;
  drawHeatmap($("heatmap"), current, $("kind").value, Number($("layer").value), $("head").value, $("units").value === "words");
}

// ------------------------------------------------------------------ requests

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

// The phrases of the "Required phrases" field: separated by "|" or tabs, trimmed, empty ones dropped.
function parseConstraints(text) {
  return text.split(/[|\t]/).map((p) => p.trim().split(/\s+/).join(" ")).filter((p) => p);
}

async function translate(event) {
  event.preventDefault();
  const sentence = $("source").value.trim();
  if (!sentence) { showError("Type a sentence first."); return; }
  const asDocument = $("as-document").checked;
  showError("");
  $("translate").disabled = true;
  $("status").textContent = "translating…";
  const beam = Number($("beam").value) || undefined;
  const request = asDocument
    ? { documents: [sentence.split("\n").map((line) => line.trim())], beam, attention: true }
    : { sentences: [sentence], beam, attention: true, markup: $("markup").checked, alignments: $("show-alignments").checked };
  const phrases = parseConstraints($("constraints").value);
  if (!asDocument && phrases.length) request.constraints = [phrases];
  if (!asDocument && $("terminology").checked) request.terminology = true;
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    if (asDocument) showDocument(body, request.documents[0]); else show(body);
  } catch (err) {
    showError(`Translation failed: ${err.message}`);
  } finally {
    $("translate").disabled = false;
    $("status").textContent = "";
  }
}

// ------------------------------------------------------------------ word alignment
// links: Pharaoh "i-j ..." between words.source[i] and words.target[j] (the words without tags,
// as the model normalized them); a word's links light up while the pointer is over it.

function wordSpans(box, words, side) {
  box.innerHTML = "";
  words.forEach((w, k) => {
    if (k) box.appendChild(document.createTextNode(" "));
    const span = document.createElement("span");
    span.className = "aw";
    span.dataset.side = side;
    span.dataset.index = String(k);
    span.textContent = w;
    box.appendChild(span);
  });
}

function showAlignment(links, words) {
  $("alignment-section").hidden = links === null;
  if (links === null) return;
  const pairs = links.split(" ").filter(Boolean).map((l) => l.split("-").map(Number));
  wordSpans($("alignment-source"), words.source, "s");
  wordSpans($("alignment-target"), words.target, "t");
  const list = $("alignment-links");
  list.innerHTML = "";
  for (const [i, j] of pairs) {
    const li = document.createElement("li");
    li.textContent = `${words.source[i]} → ${words.target[j]}`;
    li.title = `${i}-${j}`;
    list.appendChild(li);
  }
  $("alignment-note").textContent = pairs.length
    ? `${pairs.length} links (${links}); point at a word to see the words it is linked to`
    : "no links";
  const spans = [...document.querySelectorAll("#alignment-section .aw")];
  const at = (side, k) => spans.find((s) => s.dataset.side === side && Number(s.dataset.index) === k);
  for (const span of spans) {
    const k = Number(span.dataset.index), source = span.dataset.side === "s";
    span.addEventListener("mouseenter", () => {
      span.classList.add("hovered");
      for (const [i, j] of pairs) {
        if (source ? i === k : j === k) at(source ? "t" : "s", source ? j : i).classList.add("linked");
      }
    });
    span.addEventListener("mouseleave", () => spans.forEach((s) => s.classList.remove("hovered", "linked")));
  }
}

function show(body) {
  $("translation").textContent = body.translations[0]; // tags kept by markup are shown as text
  const score = body.scores[0];
  $("score").textContent = score === null ? "n/a" : score.toFixed(3);
  $("result").hidden = false;
  $("doc-translations").hidden = true;
  $("context-section").hidden = true;
  documentRecords = null;
  showAlignment(body.alignments ? body.alignments[0] : null, body.alignment_words ? body.alignment_words[0] : null);
  showRecord(body.attention ? body.attention[0] : null);
}

// ------------------------------------------------------------------ documents
// The answer to {"documents": [lines]}: translations[0][i], scores[0][i], attention[0][i] per line;
// a record's "context" (null for a sentence-level model) holds the previous sentences it read
// (sources, nearest first), the translations of them a target-side HAN model read (targets: its
// own), HAN's sentence-level weights (han_sentence (H, S, k), han_target_sentence (H, T, k)) and
// gates (han_gate (S), han_target_gate (T)), and the concatenation models' context piece counts.

function mean(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

// The weight each of the k previous sentences gets, averaged over heads and positions: (H, S, k) -> k.
function sentenceWeights(weights) {
  if (!weights || !weights.length || !weights[0].length) return null;
  const k = weights[0][0].length;
  return [...Array(k).keys()].map((j) => mean(weights.flatMap((head) => head.map((row) => row[j]))));
}

function showDocument(body, lines) {
  const translations = body.translations[0], scores = body.scores[0];
  documentRecords = body.attention ? body.attention[0] : lines.map(() => null);
  const last = lines.reduce((at, line, i) => (line ? i : at), 0);
  $("translation").textContent = translations[last];
  $("score").textContent = scores[last] === null ? "n/a" : scores[last].toFixed(3);
  const list = $("doc-translations");
  list.innerHTML = "";
  translations.forEach((t) => {
    const li = document.createElement("li");
    li.textContent = t;
    list.appendChild(li);
  });
  list.hidden = false;
  $("result").hidden = false;
  showAlignment(null, null);
  fillSelect($("doc-sentence"), lines.map((line, i) => [String(i), `${i + 1}: ${line}`]).filter(([i]) => lines[Number(i)]), false);
  $("doc-sentence").value = String(last);
  showDocumentSentence();
}

function showDocumentSentence() {
  const rec = documentRecords ? documentRecords[Number($("doc-sentence").value)] : null;
  showRecord(rec);
  const ctx = rec ? rec.context : null;
  $("context-section").hidden = !documentRecords;
  const rows = $("context-table").tBodies[0];
  rows.innerHTML = "";
  if (!ctx) {
    $("context-note").textContent = "a sentence-level model: no context read";
    return;
  }
  const source = sentenceWeights(ctx.han_sentence), target = sentenceWeights(ctx.han_target_sentence);
  const fmt = (w, j) => (w && j < w.length ? w[j].toFixed(3) : "–");
  ctx.sources.forEach((s, j) => {
    const tr = rows.insertRow();
    [`${j + 1} back`, s, ctx.targets ? ctx.targets[j] : "–", fmt(source, j), fmt(target, j)].forEach((text) => {
      tr.insertCell().textContent = text;
    });
  });
  const notes = [];
  if (!ctx.sources.length) notes.push("the document's first sentence: no context");
  if (ctx.han_gate) notes.push(`source-side HAN gate λ (mean over the sentence): ${mean(ctx.han_gate).toFixed(3)}`);
  if (ctx.han_target_gate) notes.push(`target-side HAN gate λ (mean over the translation): ${mean(ctx.han_target_gate).toFixed(3)}`);
  if (ctx.source_pieces) notes.push(`${ctx.source_pieces} source pieces of context before the sentence`);
  if (ctx.target_pieces) notes.push(`${ctx.target_pieces} target pieces of context written before the translation`);
  $("context-note").textContent = notes.join(" · ");
}

function showRecord(att) {
  current = att;
  const parse = att ? att.parse : null;
  $("tree-section").hidden = !parse;
  if (parse) {
    $("tree-note").textContent = att.parse_origin || "";
    drawTree($("tree"), parse);
  }
  $("attention-section").hidden = !att;
  if (att) setUpAttention(att);
}

async function loadInfo() {
  try {
    const info = await (await fetch("/health")).json();
    const parser = info.parser ? `trees: ${info.parser}` : "no parser (no trees)";
    $("model-info").textContent =
      `${info.checkpoint} · ${info.arch}, ${info.encoder_layers}+${info.decoder_layers} layers, ${info.heads} heads` +
      (info.syntax_features.length ? ` · syntax: ${info.syntax_features.join(", ")}` : "") + ` · ${parser} · ${info.device}` +
      (info.alignment ? ` · alignment: ${info.alignment}` : "") +
      (info.context ? ` · context: ${info.context.kind} (${info.context.side}, ${info.context.sentences} sentences)` : "");
    $("terminology-control").hidden = !info.terminology;
    if (info.terminology) $("terminology-control").title += ` (${info.terminology.file}, ${info.terminology.terms} terms)`;
    $("constraints").title = `at most ${info.limits.max_constraints} phrases of ${info.limits.max_constraint_chars} characters`;
    $("beam").value = info.beam;
    $("beam").max = info.limits.max_beam;
    $("source").dataset.maxChars = String(info.limits.max_chars);
    if (!$("as-document").checked) $("source").maxLength = info.limits.max_chars;
  } catch (err) {
    $("model-info").textContent = `cannot reach the server: ${err.message}`;
  }
}

$("translate-form").addEventListener("submit", translate);
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("translate-form").requestSubmit();
});
$("kind").addEventListener("change", updateLayerHead);
$("layer").addEventListener("change", () => { $("layer").dataset.touched = "1"; redraw(); });
$("head").addEventListener("change", redraw);
$("units").addEventListener("change", redraw);
$("doc-sentence").addEventListener("change", showDocumentSentence);
$("as-document").addEventListener("change", () => {
  const doc = $("as-document").checked; // markup and alignments are for single sentences
  for (const id of ["markup", "show-alignments", "terminology"]) { $(id).disabled = doc; if (doc) $(id).checked = false; }
  $("constraints").disabled = doc; // constraints go with single sentences
  $("source").rows = doc ? 6 : 2;
  if (doc) $("source").removeAttribute("maxlength"); // the server's limit is per sentence
  else if ($("source").dataset.maxChars) $("source").maxLength = Number($("source").dataset.maxChars);
});
loadInfo();
