"""Searching batches side by side on the CPU: in a pool of threads, or of processes forked from
the command (``decode.workers``, ``decode.processes``), following the thread policy as the load
changes."""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from syntaxnmt.config import at_most_cores
from syntaxnmt.cpu.calibration import note
from syntaxnmt.cpu.threads import ThreadWatch
from syntaxnmt.errors import UserError


def batches_side_by_side(work: Callable[[Any], Any], batches: Sequence[Any], workers: int, device: torch.device, store: Callable[[Any, Any], None] | None = None, processes: bool = False) -> Iterator[Any]:
    """Run ``work(batch)`` for every batch, ``workers`` at once (:func:`decode_workers`; 0: one per
    torch thread on the CPU), yielding each batch in order once its work is done and ``store(batch,
    work(batch))`` (when given) has run in the caller's thread. The workers run under the caller's
    grad and inference mode (thread-local in torch). On the CPU the thread policy is applied again
    between batches as the load changes (:meth:`~syntaxnmt.cpu.threads.ThreadWatch.for_this_process`:
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
    workers = (at_most_cores(requested) if requested else threads) if device.type == "cpu" else 1
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
