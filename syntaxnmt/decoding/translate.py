"""Translating with a trained model: load it, apply the options that may change after training,
batch sentences by length, search, detokenize; and scoring given targets (force-decoding)."""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.checkpoint import load_model_checkpoint, load_weights
from syntaxnmt.config import MAX_BEAM, Config, DecodeConfig, config_from_dict, merge_trees
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.calibration import model_signature, note
from syntaxnmt.cpu.calibration import prepare as prepare_cpu_kernels
from syntaxnmt.cpu.machine import ThreadWatch, describe_threads
from syntaxnmt.data.annotations import spacy_parser
from syntaxnmt.data.batches import context_batch, make_batch
from syntaxnmt.data.controls import apply_controls
from syntaxnmt.data.documents import doc_index, document_context, previous_sentences
from syntaxnmt.data.features import SourceAnnotation
from syntaxnmt.data.prepare import Tokenizers, load_tag_vocab, load_tokenizers, parse_source, tokenizers_from_assets
from syntaxnmt.decoding.search import Hypothesis, length_penalty, max_output_lengths, search
from syntaxnmt.decoding.unk import locate_unknown_words, translations_with_replacement
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD, TAG_NAMES, FeatureSpec
from syntaxnmt.model import build_model, set_hard_attention
from syntaxnmt.model.context import gather_rows


def checkpoint_path(cfg: Config, which: str) -> Path:
    """``best``/``last`` name a checkpoint of the run in ``cfg.work_dir``; anything else is a path."""
    return Path(cfg.work_dir) / f"{which}.pt" if which in ("best", "last") else Path(which)


def checkpoint_file(path: str | Path) -> Path:
    """A checkpoint file, or a run folder (a ``work_dir``): its ``best.pt``, else its ``last.pt``."""
    path = Path(path)
    if path.is_dir():
        for name in ("best.pt", "last.pt"):
            if (path / name).is_file():
                return path / name
        raise UserError(f"{path}: a folder without best.pt or last.pt (give a checkpoint file, or a run's work_dir)")
    return path


# ---------------------------------------------------------------- options at translation time

TRANSLATE_TIME_KEYS = ("decode", "model.hard_attention", "data.spacy_pipeline")
"""What may change after training: the search (every ``decode.*`` key), one-hot cross-attention at
decoding (``model.hard_attention``: ``none`` or ``decode``) and the name of the installed spaCy
pipeline that reads raw input (``data.spacy_pipeline``). ``model.attention_normalizer`` is not
among them: the scores were learned for the normalizer the model was trained with, and sparsemax
or entmax of softmax-trained scores is another model (train it with that normalizer)."""


def _leaves(tree: dict, prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of a nested dict."""
    out = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        out += _leaves(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def _at(tree: Any, dotted: str) -> Any:
    for k in dotted.split("."):
        tree = tree.get(k) if isinstance(tree, dict) else None
    return tree


def translation_config(cfg: Config, overrides: dict, *, source: str = "translate options") -> Config:
    """``cfg`` (a model's stored config) with the translation-time ``overrides`` (a nested dict, as
    :func:`syntaxnmt.config.parse_overrides` makes) applied and validated like a config file: an
    unknown key or a wrong value is a :class:`UserError` naming it. A key outside
    :data:`TRANSLATE_TIME_KEYS` is refused unless its value is the one the model was trained with
    (it changes nothing); ``model.hard_attention: train`` is refused on a model trained soft."""
    if not overrides:
        return cfg
    stored = cfg.model_dump(mode="json")
    new = config_from_dict(merge_trees(stored, overrides), source=source)
    dumped = new.model_dump(mode="json")
    for key in _leaves(overrides):
        if any(key == a or key.startswith(a + ".") for a in TRANSLATE_TIME_KEYS) or _at(dumped, key) == _at(stored, key):
            continue
        raise UserError(
            f"{source}: --{key} cannot change after training (the model has {_at(stored, key)!r}); "
            f"at translation time give --decode.*, --model.hard_attention=decode|none or --data.spacy_pipeline"
        )
    if new.model.hard_attention == "train" and cfg.model.hard_attention != "train":
        raise UserError(f"{source}: --model.hard_attention=train is a training choice (this model was trained with {cfg.model.hard_attention!r}): give decode (one-hot at decoding) or none")
    return new


def apply_translation_config(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """Make a loaded model (or ensemble) follow the decode-time model options of ``cfg``
    (:func:`translation_config`): ``model.hard_attention``."""
    if model.cfg.hard_attention != cfg.model.hard_attention:
        set_hard_attention(model, cfg.model.hard_attention)
    return model


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Config, Tokenizers]:
    """A model ready for inference, with the config it was trained with and its tokenizers (stored
    in the checkpoint; one written before they were is read with its run's prepared corpus); on
    CPU with its linear layers' kernels chosen (:func:`syntaxnmt.cpu.calibration.prepare`, the
    process's ``--cpu-kernels``)."""
    state = load_model_checkpoint(path)
    cfg = config_from_dict(state["config"], source=f"{path} (stored config)")
    if "assets" in state:
        toks = tokenizers_from_assets(cfg, state["assets"])
    else:
        try:
            toks = load_tokenizers(cfg)
        except UserError as e:
            raise UserError(f"{path} holds no tokenizers (an older checkpoint): it needs its prepared corpus, run from the folder it was trained in ({e})") from None
    model = build_model(cfg, **toks.vocab_sizes())
    model.document_context = document_context(cfg, toks.src, toks.tgt)
    load_weights(model, state["model"], path, "the model of its own stored config: a damaged checkpoint, or weights put beside another model's config")
    if device.type == "cpu":
        install_cpu(model)  # the CPU's execution (syntaxnmt.cpu)
        note(f"device cpu, {describe_threads()}")  # as training logs it; the thread policy's later changes are logged too
        prepare_cpu_kernels(model, None, timing=lambda: decoding_step(model), log=note)
    return model.to(device).eval(), cfg, toks


TIMING_SHAPE = (8, 20, 10)
"""The decoding step the CPU kernel calibration times: 8 sentences of 20 pieces, beam 5, 10 steps."""


def decoding_step(model: torch.nn.Module, beam: int = 5) -> tuple[str, Callable[[], None]]:
    """What the whole-step calibration of the CPU kernels (:func:`syntaxnmt.cpu.calibration.prepare`)
    times for inference: the signature of the step, and a function running one -- a beam-``beam``
    search of :data:`TIMING_SHAPE` synthetic sentences (fixed random pieces; for a model with
    source features, each parsed as a chain of its pieces with unknown tags) forced to its number
    of output steps."""
    n, length, steps = TIMING_SHAPE
    embed = model.src_embed
    vocab = (embed.tokens if hasattr(embed, "tokens") else embed).num_embeddings  # Transformer's Embeddings, or the RNN's nn.Embedding
    gen = np.random.default_rng(0)
    sources = [gen.integers(min(4, vocab - 1), vocab, size=length) for _ in range(n)]
    annotations = None
    if model.feature_spec:
        chain = SourceAnnotation(np.arange(length), np.arange(length), {name: np.full(length, 2) for name in TAG_NAMES})  # 2: <unk>
        annotations = [chain] * n
    batch = make_batch(sources, None, list(range(n)), annotations, model.feature_spec)

    @torch.no_grad()
    def run() -> None:
        model.eval()
        search(model, batch, beam, steps, min_len=steps)

    return f"infer {model_signature(model)} | beam {beam}, {n} sentences of {length}, {steps} steps", run


def translate_ids(
    model: torch.nn.Module,
    sources: Sequence[np.ndarray],
    decode: DecodeConfig,
    device: torch.device,
    *,
    beam: int | None = None,
    nbest: int = 1,
    annotations: Sequence[SourceAnnotation] | None = None,
    contexts: Sequence[Sequence[np.ndarray]] | None = None,
    previous: np.ndarray | None = None,
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Search every source (subword ids, no EOS) in batches of similar length; results in input order.

    ``annotations`` (one per source) are required when the model uses source features.
    ``contexts`` (one list per source: the previous source sentences of its document, nearest
    first) are read by a context model (``model.document_context``); a 2-to-2 model's output keeps
    the sentence after its last separator. ``previous`` (N, k): the positions among ``sources`` of
    those sentences, nearest first, -1 where there are fewer (``contexts`` is made from it when
    not given). A target-side HAN model needs it: it reads its own translations of the previous
    sentences, so the documents are translated in order -- the first sentence of every document
    in one pass, then the second sentences, and so on, each pass batched across documents.
    """
    beam = decode.beam_size if beam is None else beam
    if not 1 <= beam <= MAX_BEAM:
        raise UserError(f"beam size {beam}: give 1 to {MAX_BEAM}")
    spec = model.feature_spec
    if spec and annotations is None:
        raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): the input must be annotated")
    if contexts is None and previous is not None:
        contexts = [[sources[j] for j in row if j >= 0] for row in previous]
    context = getattr(model, "document_context", None) if contexts is not None else None
    results: list[list[Hypothesis]] = [None] * len(sources)  # type: ignore[list-item]
    own = context is not None and context.han_target  # the context translations are the model's own
    if own and previous is None:
        raise ValueError("a target-side HAN model translates documents in order: give the positions of the previous sentences (previous=)")
    model.eval()
    states = None
    if context is not None and context.kind == "han":
        max_pos = model.cfg.max_positions - 2
        pool, rows = _sentence_pool(sources, contexts, previous, context.sentences)
        states = DocumentStates(model, [s[:max_pos] for s in pool], device, decode.batch_size)
        states.encode(np.unique(rows[rows >= 0]))  # every context sentence once
        previous = rows
    with tqdm(total=len(sources), desc="translate", unit="sent", disable=not progress, leave=False) as bar:
        for wave in _document_waves(previous, len(sources)) if own else [np.arange(len(sources))]:
            _translate_wave(model, sources, wave, results, decode, device, beam, nbest, annotations, contexts, previous if own or states is not None else None, bar, states)
            if own:  # the decoder states of these translations: the next sentences' context
                read = np.intersect1d(wave, np.unique(previous[previous >= 0]))
                states.decode(read, [results[i][0].tokens for i in read], previous[read])
    return results


def _sentence_pool(sources: Sequence[np.ndarray], contexts, previous: np.ndarray | None, k: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The sentences a HAN model reads while translating ``sources`` -- the sources, then any
    context sentence that is not one of them -- and (N, k) the positions in that pool of each
    source's previous sentences (from ``previous`` when given, else from ``contexts``)."""
    if previous is not None:
        return list(sources), np.asarray(previous)[:, :k]
    pool, seen = list(sources), {}
    rows = np.full((len(sources), k), -1, dtype=np.int64)
    for i, sentences in enumerate(contexts):
        for j, c in enumerate(list(sentences)[:k]):
            key = np.asarray(c, dtype=np.int64).tobytes()
            if key not in seen:
                seen[key] = len(pool)
                pool.append(np.asarray(c, dtype=np.int64))
            rows[i, j] = seen[key]
    return pool, rows


class DocumentStates:
    """The context states a HAN model reads while translating documents, each sentence's computed
    once: the encoder output of a source sentence (:meth:`~syntaxnmt.model.transformer.Transformer.encode_states`)
    and, for a target-side model, the decoder states of the model's own translation of it
    (:meth:`~syntaxnmt.model.transformer.Transformer.decode_states`, one forced pass reading the
    memory the sentence was translated with: its encoder output, after the source-side HAN over
    its own previous sentences for ``side: both`` -- Miculicich et al. 2018, Sec. 2.3). A
    translation batch gathers them for its sentences' previous sentences (``batch.context_states``)
    instead of encoding k previous sentences per sentence."""

    def __init__(self, model, sources: Sequence[np.ndarray], device: torch.device, batch_size: int):
        self.model, self.sources, self.device, self.batch_size = model, sources, device, batch_size
        self.src: dict[int, torch.Tensor] = {}  # sentence -> (S, D) encoder states, EOS included
        self.tgt: dict[int, torch.Tensor] = {}  # sentence -> (T, D) decoder states of its translation, BOS first

    @torch.no_grad()
    def encode(self, ids: np.ndarray) -> None:
        """Encode the sentences ``ids`` (not yet encoded), batched by length."""
        todo = sorted((int(i) for i in ids if int(i) not in self.src), key=lambda i: len(self.sources[i]))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            src = make_batch([self.sources[i] for i in chunk], None, chunk).src.to(self.device)
            hidden = self.model.encode_states(src)
            for b, i in enumerate(chunk):
                self.src[i] = hidden[b, : len(self.sources[i]) + 1]

    @torch.no_grad()
    def decode(self, ids: np.ndarray, translations: Sequence[Sequence[int]], previous: np.ndarray | None = None) -> None:
        """The decoder states of the sentences ``ids`` reading their ``translations``; a model with
        a source-side HAN (``side: both``) reads the memory it translated them with, its HAN over
        the sentences' own previous sentences ``previous`` (len(ids), k; -1 missing; encoded)."""
        ids = [int(i) for i in ids]
        self.encode(np.asarray(ids, dtype=np.int64))
        if self.model.han is not None and previous is None:
            raise ValueError("a model with a source-side HAN decodes its context states with their own previous sentences (previous=)")
        for start in range(0, len(ids), self.batch_size):
            chunk, tokens = ids[start : start + self.batch_size], translations[start : start + self.batch_size]
            memory, memory_pad = self._stack([self.src[i] for i in chunk])
            if self.model.han is not None:
                memory = self.model.context_memory(memory, *self.gather(np.asarray(previous[start : start + self.batch_size]), False))
            tgt_in = make_batch([np.zeros(0, dtype=np.int64)] * len(chunk), [np.asarray(t, dtype=np.int64) for t in tokens], chunk).tgt_in.to(self.device)
            states = self.model.decode_states(tgt_in, memory, memory_pad)
            for b, (i, t) in enumerate(zip(chunk, tokens)):
                self.tgt[i] = states[b, : len(t) + 1]

    def _stack(self, states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, L, D) the states padded with zeros and (N, L) their padding mask."""
        stacked = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)
        lengths = torch.tensor([len(x) for x in states], device=stacked.device)
        return stacked, torch.arange(stacked.size(1), device=stacked.device)[None, :] >= lengths[:, None]

    def gather(self, previous: np.ndarray, target: bool) -> tuple[torch.Tensor, ...]:
        """``batch.context_states`` for sentences whose previous sentences are ``previous`` (B, k; -1
        missing): source states and padding, with ``target`` the target side's two as well."""
        present = np.unique(previous[previous >= 0])
        where = {int(j): r for r, j in enumerate(present)}
        rows = torch.tensor([[where.get(int(j), -1) for j in row] for row in previous], dtype=torch.long, device=self.device)
        out: list[torch.Tensor] = []
        for cache in (self.src, self.tgt) if target else (self.src,):
            if len(present):
                stacked, pad = self._stack([cache[int(j)] for j in present])
            else:
                d = self.model.cfg.d_model
                stacked, pad = torch.zeros(1, 1, d, device=self.device), torch.ones(1, 1, dtype=torch.bool, device=self.device)
            out += gather_rows(stacked, pad, rows)
        return tuple(out)


def _document_waves(previous: np.ndarray, n: int) -> list[np.ndarray]:
    """The sentences grouped by their position in their document (0: first sentences), from the
    positions of their previous sentences (``previous[:, 0]``: the one just before, -1 at a start)."""
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        j = int(previous[i, 0]) if previous.shape[1] else -1
        depth[i] = 0 if j < 0 else depth[j] + 1  # j < i: the previous sentences come first
    return [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1 if n else 0)]


def _translate_wave(model, sources, wave: np.ndarray, results: list, decode: DecodeConfig, device, beam: int, nbest: int, annotations, contexts, previous: np.ndarray | None, bar, states: DocumentStates | None = None) -> None:
    """Search the sources ``wave`` (indices into ``sources``) into ``results``, batched by length;
    a HAN model reads the ``states`` of the previous sentences ``previous`` (for a target-side
    one also the states of its best translations of them), a concatenation model ``contexts``."""
    spec = model.feature_spec
    max_pos = model.cfg.max_positions - 2
    context = getattr(model, "document_context", None) if contexts is not None else None
    order = wave[np.argsort([len(sources[i]) for i in wave], kind="stable")[::-1]]

    def search_batch(idx: np.ndarray) -> list[list[Hypothesis]]:
        anns = [_truncate(annotations[i], max_pos) for i in idx] if spec else None
        if states is not None:
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist()).to(device)
            batch.context_states = states.gather(previous[idx], context.han_target)
        elif context is not None:
            batch = context_batch(context, [sources[i][:max_pos] for i in idx], None, idx.tolist(), [[c[:max_pos] for c in contexts[i]] for i in idx])
            batch.src = batch.src[:, -(max_pos + 1) :]  # a long context is cut from the left; the current sentence stays
            batch = batch.to(device)
        else:
            batch = make_batch([sources[i][:max_pos] for i in idx], None, idx.tolist(), anns, spec).to(device)
        src_lens = batch.src.ne(0).sum(1) - 1
        max_len = max_output_lengths(src_lens, decode.max_len_a, decode.max_len_b, max_pos)
        hyps = search(model, batch, beam, max_len, decode.min_len, decode.length_penalty, nbest, decode.coverage_penalty, decode.length_penalty_type, decode.cpu_softmax)
        if decode.unk_replace != "none":
            locate_unknown_words(model, batch, hyps, decode)
        if context is not None and context.concat_target:
            for h in (h for nb in hyps for h in nb):
                current = context.current_part(h.tokens)
                h.context_tokens, h.tokens = h.tokens[: len(h.tokens) - len(current)], current
        return hyps

    def store(idx: np.ndarray, hyps: list[list[Hypothesis]]) -> None:
        for i, h in zip(idx, hyps):
            results[i] = h

    batches = [order[start : start + decode.batch_size] for start in range(0, len(order), decode.batch_size)]
    for idx in batches_side_by_side(search_batch, batches, decode.workers, device, store, decode.processes):
        bar.update(len(idx))


def batches_side_by_side(work: Callable[[Any], Any], batches: Sequence[Any], workers: int, device: torch.device, store: Callable[[Any, Any], None] | None = None, processes: bool = False) -> Iterator[Any]:
    """Run ``work(batch)`` for every batch, ``workers`` at once (:func:`decode_workers`; 0: one per
    torch thread on the CPU), yielding each batch in order once its work is done and ``store(batch,
    work(batch))`` (when given) has run in the caller's thread. The workers run under the caller's
    grad and inference mode (thread-local in torch). On the CPU the thread policy is applied again
    between batches as the load changes (:meth:`~syntaxnmt.cpu.machine.ThreadWatch.for_this_process`:
    every 30 s, where the policy chose the threads), and the batches at once follow the new thread
    count. ``processes`` (``decode.processes``): batches at once of one thread each are searched in
    forked processes instead of threads (:func:`_forked_pool`); ``work`` must then hand its whole
    effect back as its result, for ``store``."""
    watch = ThreadWatch.for_this_process() if device.type == "cpu" else None
    done = 0
    while done < len(batches):
        n, threads = decode_workers(workers, len(batches) - done, device)
        fork = processes and device.type == "cpu" and n > 1 and threads == 1
        for batch in _side_by_side(work, batches[done:], n, threads, watch.due if watch is not None else None, store, fork):
            done += 1
            yield batch
        if watch is not None:
            watch.poll(note)


def _side_by_side(work: Callable[[Any], Any], batches: Sequence[Any], n: int, threads: int, stop: Callable[[], bool] | None, store: Callable[[Any, Any], None] | None = None, fork: bool = False) -> Iterator[Any]:
    """:func:`batches_side_by_side` with ``n`` workers of ``threads`` threads (``fork``: processes
    of one thread), until ``stop()`` says so after a batch: the batches not started yet are left for
    the caller (a prefix of ``batches`` is yielded, in order)."""
    store = store or (lambda batch, result: None)
    if n == 1:
        for batch in batches:
            store(batch, work(batch))
            yield batch
            if stop is not None and stop():
                return
        return
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def in_worker(batch) -> Any:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return work(batch)

    with intra_op_threads(threads), (_forked_pool if fork else _thread_pool)(in_worker, n) as submit:
        pending = deque((batch, submit(batch)) for batch in batches)
        while pending:
            batch, future = pending.popleft()
            store(batch, _result(future))
            yield batch
            if stop is not None and stop():
                # the pool starts its work in order: cancelling from the newest back leaves the started ones
                while pending and pending[-1][1].cancel():
                    pending.pop()
                for batch, future in pending:
                    store(batch, _result(future))
                    yield batch
                return


_FORKED: dict[int, Callable[[Any], Any]] = {}  # the work of each forked pool, by id: what its children inherit


def _forked_call(key: int, batch: Any) -> Any:
    """In a forked search process: the inherited work of its pool, on one batch."""
    return _FORKED[key](batch)


def _forked_start() -> None:
    """A forked search process runs one OpenMP thread: libgomp is not fork-safe with a bigger team
    (as torch's DataLoader workers); Ctrl-C is the command's to handle (as with threads, the
    batches under way finish first)."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _thread_pool(work: Callable[[Any], Any], n: int) -> Iterator[Callable[[Any], Future]]:
    """``submit(batch)``: ``work(batch)`` in one of ``n`` threads of this process."""
    with ThreadPoolExecutor(n, thread_name_prefix="syntaxnmt-decode") as pool:
        yield lambda batch: pool.submit(work, batch)


@contextmanager
def _forked_pool(work: Callable[[Any], Any], n: int) -> Iterator[Callable[[Any], Future]]:
    """``submit(batch)``: ``work(batch)`` in one of ``n`` processes forked from this one (the
    model, the sources and ``work`` shared copy-on-write), each searching one batch at a time: no
    GIL between the batches searched at once (``decode.processes``; docs/deployment.md). Results
    come back pickled."""
    key = id(work)
    _FORKED[key] = work
    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"), initializer=_forked_start) as pool:
            yield lambda batch: pool.submit(_forked_call, key, batch)
    finally:
        del _FORKED[key]


def _result(future) -> Any:
    """A batch's result; a search process that died is one clear error."""
    try:
        return future.result()
    except BrokenProcessPool:
        raise UserError("decode.processes: a search process died (killed by the system, out of memory?); run again, or with decode.processes: false") from None


def decode_workers(requested: int, batches: int, device: torch.device, threads: int | None = None) -> tuple[int, int]:
    """How many batches are searched at once on the CPU and with how many torch threads each
    (``decode.workers``; inter-op parallelism, CTranslate2's ``inter_threads``). The products of
    incremental decoding are small (a few hundred rows), so two threads on one product gain little
    over one (1.3x for the side-by-side model), while two batches on one thread each run side by
    side. A batch's search is the same either way (same sentences, same steps); only the threads of
    its products change, which can move the last bits of the scores (as any change of threads).
    0 (the default): the command's torch threads, one each, when there are at least two batches;
    N: N at once (at most the number of batches), the threads shared between them. ``threads``:
    the threads to share (default: torch's)."""
    threads = threads or torch.get_num_threads()
    workers = (requested or threads) if device.type == "cpu" else 1
    workers = max(1, min(workers, batches))
    return workers, max(1, threads // workers)


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the block, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _truncate(ann: SourceAnnotation, max_pieces: int) -> SourceAnnotation:
    return SourceAnnotation(ann.word_of_piece[:max_pieces], ann.heads, ann.tags) if len(ann.word_of_piece) > max_pieces else ann


def source_parses(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>", why: str = "this model uses parses"):
    """Parses of raw source lines: from a CoNLL-U file (``conllu``) or as the corpus was parsed
    (``data.annotate``); a bad tree is an error. ``why`` starts the message when neither is available."""
    method = "conllu" if conllu else cfg.data.annotate
    if method in ("conllu", "none") and not conllu:
        raise UserError(f"{why}: give the parses of {source_name} with --src-conllu FILE")
    if method == "spacy":
        try:
            spacy_parser(cfg.data.spacy_pipeline)  # loaded once (kept for the parse below)
        except UserError as e:
            raise UserError(f"{why}: give the parses of {source_name} with --src-conllu FILE, or install its spaCy pipeline ({e})") from None
    parse_cfg = cfg.model_copy(deep=True)
    parse_cfg.data.annotate, parse_cfg.data.bad_tree = method, "fail"
    parses, _ = parse_source(parse_cfg, list(lines), source_name, conllu or "", progress=False)
    return parses


def parse_annotations(cfg: Config, parses: Sequence, word_of_piece: Sequence[Sequence[int]], tags=None) -> list[SourceAnnotation]:
    """Source annotations (tree and tag ids) of parsed sentences whose pieces belong to ``word_of_piece``;
    ``tags``: the model's tag vocabularies (:attr:`Tokenizers.tags`; default: the prepared corpus's).
    A control arm's model (``data.structure_control``) reads the parses as its training did
    (:mod:`syntaxnmt.data.controls`): the same random tree or bijection for the same sentence."""
    tags = tags if tags is not None else load_tag_vocab(cfg)
    if tags is None:
        raise UserError(f"{cfg.prepared_dir}: the prepared corpus has no tag vocabulary (tags.json)")
    parses = apply_controls(parses, cfg.data.structure_control, tags)
    return [
        SourceAnnotation(np.asarray(w, dtype=np.int64), np.asarray(p.heads, dtype=np.int64), {t: tags.encode(t, getattr(p, t)) for t in TAG_NAMES})
        for p, w in zip(parses, word_of_piece)
    ]


def parser_words(cfg: Config, lines: Sequence[str], conllu: str | None = None, source_name: str = "<input>") -> list[list[str]] | None:
    """The words of raw source lines as a model trained on a parsed corpus saw them in training:
    the parser's tokens (:func:`syntaxnmt.data.prepare.model_words`), from ``conllu`` when given, else
    from the tokenizer alone of the corpus's spaCy pipeline (no parse). A corpus parsed from
    CoNLL-U files whose pipeline is not installed is taken to be tokenized: its lines' whitespace
    tokens. None for a corpus that was not parsed (the model reads the lines as they are)."""
    if cfg.data.annotate == "none":
        return None
    if conllu:
        return [p.words for p in source_parses(cfg, lines, conllu, source_name)]

    try:
        return spacy_parser(cfg.data.spacy_pipeline).tokenize(lines)
    except (ImportError, UserError) as e:
        if cfg.data.annotate == "conllu":
            tqdm.write(
                f"syntaxnmt: warning: {source_name}: read as whitespace-separated words, since the spaCy pipeline "
                f"'{cfg.data.spacy_pipeline}' cannot split it ({e}); tokenize the input as the CoNLL-U words were, "
                "give --src-conllu, or name an installed pipeline with --data.spacy_pipeline",
                file=sys.stderr,
            )
            return [line.split() for line in lines]
        raise UserError(f"this model was trained on a parser's words: give the parses of {source_name} with --src-conllu FILE, or install its spaCy pipeline ({e})") from None


def encode_source_lines(cfg: Config, toks: Tokenizers, lines: Sequence[str], spec: FeatureSpec, conllu: str | None = None, source_name: str = "<input>") -> tuple[list[np.ndarray], list[SourceAnnotation] | None]:
    """Subword ids of raw source lines and, when the model needs them, their annotations.

    A model with tree relations or tag heads needs the parse of every sentence: from spaCy when
    the corpus was parsed with spaCy, else from a CoNLL-U file (``conllu``) -- missing is an error.
    Any model trained on a parsed corpus reads the parser's words (:func:`parser_words`), so that
    every system of a study sees the same tokens, with or without linguistic features.
    """
    if not spec.needs_parse:
        words = parser_words(cfg, lines, conllu, source_name)
        ids, word_of_piece = toks.src.encode_words(words) if words is not None else toks.src.encode_with_words(list(lines))
        anns = [SourceAnnotation(np.asarray(w), np.zeros(0, dtype=np.int64)) for w in word_of_piece] if spec else None
        return [np.asarray(i, dtype=np.int64) for i in ids], anns
    parses = source_parses(cfg, lines, conllu, source_name, f"this model uses {', '.join(sorted(spec.names - {'bie'}))} from parses")
    ids, words = toks.src.encode_words([p.words for p in parses])
    return [np.asarray(i, dtype=np.int64) for i in ids], parse_annotations(cfg, parses, words, toks.tags)


def without_empty_lines(lines: Sequence[str], translate: Callable[[list[str], list[int]], list]) -> list[list[tuple[str, float]]]:
    """``translate(kept, numbers)`` of the lines with words (and their 1-based numbers); an empty
    or blank line gets an empty translation with score 0, in its place."""
    numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
    out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
    for n, nbest in zip(numbers, translate([lines[n - 1] for n in numbers], numbers) if numbers else []):
        out[n - 1] = nbest
    return out


def warn_cut_lines(sources: Sequence[np.ndarray], limit: int, source_name: str, line_numbers: Sequence[int] | None = None) -> None:
    """A warning on stderr for each source longer than the ``limit`` subwords the model reads (it is cut)."""
    for k, ids in enumerate(sources):
        if len(ids) > limit:
            n = line_numbers[k] if line_numbers is not None else k + 1
            tqdm.write(f"syntaxnmt: warning: {source_name}:{n}: {len(ids)} subwords, only the first {limit} are translated (the model's max_positions)", file=sys.stderr)


@dataclass
class Output:
    """One translation of a source line: detokenized text, the search's score (log P / lp(y), as
    hypotheses are ranked), the total log-probability (EOS included) and the output's subword ids."""

    text: str
    score: float
    log_prob: float
    tokens: list[int]
    context_tokens: list[int] | None = None  # 2-to-2: the context part the model wrote before ``tokens``


def translate_outputs(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, *, conllu: str | None = None, source_name: str = "<input>", line_numbers: Sequence[int] | None = None, docs: Sequence[str] | None = None, **kw) -> list[list[Output]]:
    """Raw source lines to n-best lists of :class:`Output`, best first.

    An empty or blank line translates to an empty line without reaching the model (with
    ``conllu``, the CoNLL-U file holds one sentence per non-empty line, as for ``prepare``); a line
    longer than the model's positions is cut, with a warning naming it (docs/robustness.md).
    ``docs`` (a document id per line): a context model reads the previous lines of each line's
    document (a sentence-level model translates as without them)."""
    if docs is not None and len(docs) != len(lines):
        raise UserError(f"{len(docs)} document ids for {len(lines)} lines of {source_name} (give one id per line)")
    if any(not line.strip() for line in lines):
        numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
        out: list[list[Output]] = [[Output("", 0.0, 0.0, [])] for _ in lines]
        if numbers:
            kept_docs = None if docs is None else [docs[n - 1] for n in numbers]
            kept = translate_outputs(model, cfg, toks, [lines[n - 1] for n in numbers], decode, device, conllu=conllu, source_name=source_name, line_numbers=numbers, docs=kept_docs, **kw)
            for n, nbest in zip(numbers, kept):
                out[n - 1] = nbest
        return out
    sources, annotations = encode_source_lines(cfg, toks, lines, model.feature_spec, conllu, source_name)
    warn_cut_lines(sources, model.cfg.max_positions - 2, source_name, line_numbers)
    contexts = None
    context = getattr(model, "document_context", None)
    if docs is not None and context is not None:
        previous = previous_sentences(doc_index(docs, f"{source_name} (document ids)"), context.sentences)
        contexts = [[sources[j] for j in row if j >= 0] for row in previous]
    else:
        previous = None
    hyps = translate_ids(model, sources, decode, device, annotations=annotations, contexts=contexts, previous=previous, **kw)
    if decode.unk_replace != "none":
        words = parser_words(cfg, lines, conllu, source_name)
        texts = translations_with_replacement(toks, lines, sources, hyps, decode, words)
        return [[Output(text, h.score, h.log_prob, h.tokens, h.context_tokens) for (text, _), h in zip(tnb, nb)] for tnb, nb in zip(texts, hyps)]
    return [[Output(toks.tgt.decode(h.tokens), h.score, h.log_prob, h.tokens, h.context_tokens) for h in nb] for nb in hyps]


def translate_lines(model, cfg: Config, toks: Tokenizers, lines: Sequence[str], decode: DecodeConfig, device: torch.device, **kw) -> list[list[tuple[str, float]]]:
    """Raw source lines to detokenized n-best lists of (translation, score) (:func:`translate_outputs`)."""
    return [[(o.text, o.score) for o in nb] for nb in translate_outputs(model, cfg, toks, lines, decode, device, **kw)]


# ---------------------------------------------------------------- scoring given targets


def check_forced_pairs(model, sources: Sequence, targets: Sequence, annotations=None, what: str = "sentence", annotate_hint: str = "the input must be annotated") -> None:
    """What force-decoding (scoring, alignment) needs: annotations for a model with source
    features, and no sentence longer than the model's positions; else a one-line error."""
    spec = model.feature_spec
    if spec and annotations is None:
        raise UserError(f"this model uses source features ({', '.join(sorted(spec.names))}): {annotate_hint}")
    limit = model.cfg.max_positions - 2
    for k, (src, tgt) in enumerate(zip(sources, targets), start=1):
        if max(len(src), len(tgt)) > limit:
            raise UserError(f"{what} {k} has {max(len(src), len(tgt))} subwords: more than the model's {limit} positions")


def _members(model) -> list[torch.nn.Module]:
    """The models of an ensemble (:class:`syntaxnmt.decoding.ensemble.Ensemble`), or the model itself."""
    return list(getattr(model, "models", [model]))


@torch.no_grad()
def score_ids(model, sources: Sequence[np.ndarray], targets: Sequence[Sequence[int]], device: torch.device, *, batch_size: int = 64, annotations: Sequence[SourceAnnotation] | None = None) -> list[float]:
    """log P(y | x) of every target (subword ids, no BOS/EOS) given its source, EOS included:
    the sum over the reference's positions of the model's log-probability of the reference token
    (teacher forcing). An ensemble scores with the distribution it searches with: the members'
    mean log-probability, renormalized at every position (:mod:`syntaxnmt.decoding.ensemble`)."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets")
    check_forced_pairs(model, sources, targets, annotations)
    spec = model.feature_spec
    members = _members(model)
    was_training = [m.training for m in members]
    for m in members:
        m.eval()
    order = np.argsort([len(s) + len(t) for s, t in zip(sources, targets)], kind="stable")
    out = [0.0] * len(sources)
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size].tolist()
            anns = [annotations[i] for i in idx] if spec else None
            batch = make_batch([np.asarray(sources[i], dtype=np.int64) for i in idx], [np.asarray(targets[i], dtype=np.int64) for i in idx], idx, anns, spec).to(device)
            log_probs = [torch.log_softmax(m(batch).logits.float(), dim=-1) for m in members]
            lp = log_probs[0] if len(log_probs) == 1 else torch.log_softmax(torch.stack(log_probs).mean(0), dim=-1)
            gold = lp.gather(-1, batch.tgt_out[..., None]).squeeze(-1).masked_fill(batch.tgt_out.eq(PAD), 0.0)
            for i, total in zip(idx, gold.sum(1).tolist()):
                out[i] = total
    finally:
        for m, t in zip(members, was_training):
            m.train(t)
    return out


def normalized_score(log_prob: float, length: int, decode: DecodeConfig) -> float:
    """The search's ranking score of an output of ``length`` subwords (EOS not counted here) with
    total log-probability ``log_prob``: log P / lp(y) (:func:`syntaxnmt.decoding.search.length_penalty`)."""
    return log_prob / length_penalty(length + 1, decode.length_penalty, decode.length_penalty_type) if decode.length_penalty else log_prob
