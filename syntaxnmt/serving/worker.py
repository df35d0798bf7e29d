"""One thread that owns the model: it batches the waiting requests, cuts large ones into small batches taken in turn, and stops the work of a request whose caller is gone.

PyTorch modules (and spaCy pipelines) are not safe to call from several threads at once, and a
web server must not run a search on its event loop. :class:`BatchingWorker` takes jobs from any
thread (``submit`` returns a :class:`concurrent.futures.Future`, which asyncio code awaits with
``asyncio.wrap_future``), and its single thread runs them:

- **batching**: the items of the waiting jobs that share a key (e.g. ``("translate", beam)``) go
  through the handler as one call, so fifty concurrent one-sentence requests cost one batched
  search, not fifty;
- **round-robin**: a batch holds at most ``max_batch`` items and ``max_batch_work`` units of work
  (the caller's estimate per item, e.g. source tokens x beam); a job larger than that is cut into
  several batches, and a job that gave items to a batch goes to the back of the line, so the
  other jobs' items come before its next part;
- **checkpoints**: the handler gets a ``checkpoint`` to call between steps (the server calls it
  before every decoder step). It raises :class:`Cancelled` when every job of the batch is gone
  (its future cancelled: a timeout, a client that disconnected) or when the shutdown grace is
  over, so that work stops rather than running on unseen; and when the batch has run for
  ``slice_seconds`` while other jobs wait, it runs one batch of those first, on the same thread
  (nested up to ``max_depth``), so a request that arrives while one long sentence is searched
  waits a fraction of a second, not the whole search;
- **shutdown**: :meth:`stop` refuses new jobs and lets the others run for a grace period, after
  which running batches stop at their next checkpoint and every job left fails with
  :class:`ShuttingDown`.

The model must be stateless between calls (ours is: the decoder state is an argument of
``step``), since a nested batch runs in the middle of another's search.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

Checkpoint = Callable[[], None]
Handler = Callable[[Hashable, list, Checkpoint], list]
"""``handler(key, items, checkpoint) -> results``: one result per item, in order; call
``checkpoint()`` often (it may raise :class:`Cancelled`, or run other batches before returning)."""


class Cancelled(Exception):
    """Raised by the checkpoint in a batch that is to stop (its callers are gone, or shutdown)."""


class ShuttingDown(Exception):
    """The exception of a job that the worker did not finish because it is shutting down."""


@dataclass(eq=False)
class Job:
    """One caller's items; the future stays pending until every item has its result."""

    key: Hashable
    items: list
    costs: list[float]
    future: Future = field(default_factory=Future)
    taken: int = 0  # items handed to batches so far
    finished: int = 0  # items with a result
    results: list = field(default_factory=list)
    counted: bool = False  # already in stats["cancelled"]

    def __post_init__(self) -> None:
        self.results = [None] * len(self.items)


Slice = tuple[Job, int, int]  # a job's items [start, end) in a batch


@dataclass(eq=False)
class _Frame:
    slices: list[Slice]
    since: float  # when the batch last got the thread (started, or came back from a nested batch)


def _settle(setter: Callable[[Any], None], value: Any) -> None:
    """Set a future's result or exception unless its caller cancelled it meanwhile."""
    try:
        setter(value)
    except InvalidStateError:
        pass


class BatchingWorker:
    """Run ``handler`` on one thread over batches of the jobs submitted from any thread.

    When a batch of several jobs fails, each job's part is re-run alone, so only the job at
    fault gets the exception (and its remaining items are dropped).
    """

    def __init__(
        self,
        handler: Handler,
        max_batch: int = 64,
        max_batch_work: float = math.inf,
        slice_seconds: float = 0.25,
        max_depth: int = 3,
        name: str = "syntaxnmt-inference",
    ):
        self.handler, self.max_batch, self.max_batch_work, self.name = handler, max_batch, max_batch_work, name
        self.slice_seconds, self.max_depth = slice_seconds, max_depth
        self._cond = threading.Condition(threading.RLock())
        self._jobs: deque[Job] = deque()  # jobs with items not yet taken, in turn order
        self._thread: threading.Thread | None = None
        self._stopping = False  # stop() called: submit refuses new jobs
        self._abort_at = math.inf  # time.monotonic() after which running batches stop
        self._stack: list[_Frame] = []  # the batches in progress, outermost first (worker thread only)
        self.stats = {"batches": 0, "jobs": 0, "items": 0, "cancelled": 0}  # written by the worker thread only

    # ------------------------------------------------------------ any thread

    def submit(self, key: Hashable, items: Sequence[Any], costs: Sequence[float] | None = None) -> Future:
        """Queue a job; its future gets the handler's results for ``items`` (or an exception).

        ``costs`` (one per item, default 1) is what ``max_batch_work`` bounds. Cancelling the
        future drops the job's items not yet run, and stops a batch whose jobs are all cancelled.
        """
        job = Job(key, list(items), [1.0] * len(items) if costs is None else [float(c) for c in costs])
        if len(job.costs) != len(job.items):
            raise ValueError(f"{len(job.items)} items but {len(job.costs)} costs")
        with self._cond:
            if self._stopping:
                job.future.set_exception(ShuttingDown("the server is shutting down"))
                return job.future
            if not job.items:
                job.future.set_result([])
                return job.future
            self._jobs.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return job.future

    def stop(self, grace: float | None = None) -> None:
        """Refuse new jobs; let the others run for ``grace`` seconds (None: until they are done),
        then stop the running batches at their next checkpoint and fail the rest with
        :class:`ShuttingDown`. Returns at once."""
        with self._cond:
            self._stopping = True
            if grace is not None:
                self._abort_at = min(self._abort_at, time.monotonic() + max(0.0, grace))
            self._cond.notify_all()

    def close(self, timeout: float | None = None, grace: float | None = None) -> bool:
        """:meth:`stop`, then wait ``timeout`` seconds for the thread to end; True if it has (a
        later ``submit`` then starts a new one)."""
        self.stop(grace)
        with self._cond:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if thread is not None and thread.is_alive():
            return False
        with self._cond:
            if self._thread is thread:
                self._thread = None
            self._stopping, self._abort_at = False, math.inf
        return True

    def alive(self) -> bool:
        """Whether the thread is running."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    # ------------------------------------------------------------ the worker thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    self._drop_gone()
                    now = time.monotonic()
                    if now >= self._abort_at:
                        for job in self._jobs:
                            _settle(job.future.set_exception, ShuttingDown("the server is shutting down"))
                        self._jobs.clear()
                        return
                    if self._jobs:
                        break
                    if self._stopping:
                        return
                    self._cond.wait(None if math.isinf(self._abort_at) else self._abort_at - now)
            self._run_next(set())

    def _drop_gone(self) -> None:
        """Forget the queued jobs whose callers cancelled them (call with the lock held)."""
        for job in [j for j in self._jobs if j.future.done()]:
            self._jobs.remove(job)
            self._count_cancelled(job)

    def _count_cancelled(self, job: Job) -> None:
        if job.future.cancelled() and not job.counted:
            job.counted = True
            self.stats["cancelled"] += 1

    def _take(self, exclude: set[Job]) -> tuple[Hashable, list[Slice]] | None:
        """The next batch (call with the lock held): the first waiting job outside ``exclude``
        gives the key; then, in turn order, the items of the jobs with that key until
        ``max_batch`` items or ``max_batch_work`` (at least one item). The jobs that gave items
        go to the back of the line."""
        self._drop_gone()
        head = next((job for job in self._jobs if job not in exclude), None)
        if head is None:
            return None
        key, slices, n, work = head.key, [], 0, 0.0
        for job in list(self._jobs):
            if job in exclude or job.key != key:
                continue
            start = end = job.taken
            while end < len(job.items) and n < self.max_batch and (n == 0 or work + job.costs[end] <= self.max_batch_work):
                work += job.costs[end]
                n, end = n + 1, end + 1
            if end == start:
                break
            job.taken = end
            slices.append((job, start, end))
            self._jobs.remove(job)
            if end < len(job.items):
                self._jobs.append(job)
        return key, slices

    def _run_next(self, exclude: set[Job]) -> bool:
        """Take and run one batch of jobs outside ``exclude``; False if there was none."""
        with self._cond:
            taken = self._take(exclude)
        if taken is None:
            return False
        self._execute(*taken)
        return True

    def _execute(self, key: Hashable, slices: list[Slice]) -> None:
        items = [item for job, start, end in slices for item in job.items[start:end]]
        self.stats["batches"] += 1
        self.stats["jobs"] += len(slices)
        self.stats["items"] += len(items)
        self._stack.append(_Frame(slices, time.monotonic()))
        error: BaseException | None = None
        try:
            results = self.handler(key, items, self._checkpoint)
            if len(results) != len(items):
                error = RuntimeError(f"the handler gave {len(results)} results for {len(items)} items")
        except BaseException as e:  # noqa: BLE001 -- handed to the caller, never kills the thread
            error = e
        finally:
            self._stack.pop()
        if isinstance(error, Cancelled):
            for job, _, _ in slices:
                self._abandon(job, ShuttingDown("the server is shutting down"))
        elif error is not None and len(slices) == 1:
            self._abandon(slices[0][0], error)
        elif error is not None:  # find the job at fault: each part alone
            for part in slices:
                if part[0].future.cancelled():
                    self._count_cancelled(part[0])
                else:
                    self._execute(key, [part])
        else:
            at = 0
            for job, start, end in slices:
                job.results[start:end] = results[at : at + end - start]
                at, job.finished = at + end - start, job.finished + end - start
                if job.future.cancelled():
                    self._count_cancelled(job)
                elif job.finished == len(job.items):
                    _settle(job.future.set_result, job.results)

    def _abandon(self, job: Job, error: BaseException) -> None:
        """Fail ``job`` with ``error`` (unless its caller cancelled it) and drop its other items."""
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
        if job.future.cancelled():
            self._count_cancelled(job)
        else:
            _settle(job.future.set_exception, error)

    def _checkpoint(self) -> None:
        """Called by the handler between steps of the current batch (see the module docstring)."""
        frame = self._stack[-1]
        self._check(frame)
        if len(self._stack) >= self.max_depth or time.monotonic() - frame.since < self.slice_seconds:
            return
        exclude = {job for f in self._stack for job, _, _ in f.slices}
        if self._run_next(exclude):
            frame.since = time.monotonic()
            self._check(frame)

    def _check(self, frame: _Frame) -> None:
        if time.monotonic() >= self._abort_at:
            raise Cancelled("the shutdown grace is over")
        if all(job.future.done() for job, _, _ in frame.slices):
            raise Cancelled("every request of this batch is gone")
