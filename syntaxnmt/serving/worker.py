"""One thread that owns the model: it batches the waiting requests, cuts large ones into small batches taken in turn, and stops the work of a request whose caller is gone.

PyTorch modules (and spaCy pipelines) are not safe to call from several threads at once, and a
web server must not run a search on its event loop. :class:`BatchingWorker` takes jobs from any
thread (``submit`` returns a :class:`concurrent.futures.Future`, which asyncio code awaits with
``asyncio.wrap_future``), and its single thread runs them:

- **batching**: the items of the waiting jobs that share a key (e.g. ``("translate", beam)``) go
  through the handler as one call, so fifty concurrent one-sentence requests cost one batched
  search, not fifty;
- **fair turns** (least attained service, Kleinrock 1976 Sec. 4.6, at batch granularity): a batch
  holds at most ``max_batch`` items and ``max_batch_work`` units of work (the caller's estimate
  per item, e.g. source tokens x beam); a job larger than that is cut into several batches. The
  next batch is led by the waiting job with the least work served so far plus the work of its next
  item (ties: the earlier job), so jobs of equal size take turns batch by batch, and a request
  that just came in (nothing served) goes before every large one that has had a batch: a small
  request waits at most the batch that runs (a few large requests arriving at once: a batch
  each). Items of other jobs with the same key fill the batch in the same order, unless an
  item's work is over twice the leading item's (and over ``max_batch_work / 16``): a short
  request is not held by a long sentence batched with it;
- **checkpoints**: the handler gets a ``checkpoint`` to call between steps (the server calls it
  before every decoder step). It raises :class:`Cancelled` when every job of the batch is gone
  (its future cancelled: a timeout, a client that disconnected) or when the shutdown grace is
  over, so that work stops rather than running on unseen; and when the batch has run for
  ``slice_seconds`` while a job with strictly less served-plus-next work waits (a smaller or
  newer one), it runs one batch of those first, on the same thread (nested up to ``max_depth``),
  so a request that arrives while one long sentence is searched waits a fraction of a second, not
  the whole search (large jobs of equal standing do not nest into each other);
- **admission** (``submit(..., timeout=T)``): from the work the worker has done per second
  (its recent batches) and the work waiting, a job that would not finish within ``T`` seconds
  under these turns, or whose work would push an admitted job past its own deadline, fails at
  once with :class:`Overloaded` (``retry_after``: seconds until the waiting work is done) rather
  than holding the queue until it times out;
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
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

Checkpoint = Callable[[], None]
Handler = Callable[[Hashable, list, Checkpoint], list]
"""``handler(key, items, checkpoint) -> results``: one result per item, in order; call
``checkpoint()`` often (it may raise :class:`Cancelled`, or run other batches before returning)."""


class Cancelled(Exception):
    """Raised by the checkpoint in a batch that is to stop (its callers are gone, or shutdown)."""


class ShuttingDown(Exception):
    """The exception of a job that the worker did not finish because it is shutting down."""


class Overloaded(Exception):
    """The exception of a job refused at submission: it would not finish in its time (or would
    make an admitted job miss its own). ``retry_after``: seconds until the waiting work is done."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


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
    seq: int = 0  # submission order (ties of priority)
    served: float = 0.0  # work of the items handed to batches so far
    deadline: float = math.inf  # time.monotonic() by which the caller wants the answer
    admitted: float = 0.0  # time.monotonic() of its admission
    expected: float | None = None  # the seconds it was expected to take when admitted (before caution)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.items)

    @cached_property
    def work(self) -> float:
        """The work of all its items (its costs are fixed at submission)."""
        return sum(self.costs)

    def priority(self) -> tuple[float, int]:
        """The turn order: work served plus the next item's (least attained service), then age."""
        return self.served + (self.costs[self.taken] if self.taken < len(self.items) else 0.0), self.seq


Slice = tuple[Job, int, int]  # a job's items [start, end) in a batch


@dataclass(eq=False)
class _Frame:
    slices: list[Slice]
    since: float  # when the batch last got the thread (started, or came back from a nested batch)
    priority: tuple[float, int]  # its leading job's when it was taken: only a job before that nests
    work: float  # of its items
    nested: float = 0.0  # seconds spent in batches nested in it
    nested_large: float = 0.0  # of which in large ones (:meth:`BatchingWorker._large`)


def finish_work(job: Job, others: Sequence[Job]) -> float:
    """The work done before ``job`` is finished under least-attained-service turns: its own
    remaining work, and each other job's until that job has been served as much as ``job`` will
    have been (all of it if it is smaller)."""
    total = job.work
    return (total - job.served) + sum(max(0.0, min(o.work, total) - o.served) for o in others if o is not job)


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
        caution: float = 1.25,
    ):
        self.handler, self.max_batch, self.max_batch_work, self.name = handler, max_batch, max_batch_work, name
        self.slice_seconds, self.max_depth = slice_seconds, max_depth
        self.caution = caution  # admission: the expected seconds of a job are taken this many times (estimates are rough)
        self._cond = threading.Condition(threading.RLock())
        self._jobs: list[Job] = []  # jobs with items not yet taken (order: Job.priority)
        self._seq = 0
        self._rate = (0.0, 0.0)  # decayed sums of (work, seconds) of the recent large batches, the small ones' time included: work per second
        self._rate_any = (0.0, 0.0)  # (work, seconds) of every batch, each its own time (small ones pay a per-batch cost: slower)
        self._small_seconds = 0.0  # time of the small batches run (not nested) since the last large one, while busy
        self._warm = False  # a first batch has run (its time, with the model's first-call costs, is not counted)
        self._overrun = 1.0  # recent large jobs' seconds over their expected seconds (decayed): raises the caution
        self._thread: threading.Thread | None = None
        self._stopping = False  # stop() called: submit refuses new jobs
        self._abort_at = math.inf  # time.monotonic() after which running batches stop
        self._stack: list[_Frame] = []  # the batches in progress, outermost first (worker thread only)
        self.stats = {"batches": 0, "jobs": 0, "items": 0, "cancelled": 0}  # written by the worker thread only

    # ------------------------------------------------------------ any thread

    def submit(self, key: Hashable, items: Sequence[Any], costs: Sequence[float] | None = None, timeout: float | None = None) -> Future:
        """Queue a job; its future gets the handler's results for ``items`` (or an exception).

        ``costs`` (one per item, default 1) is what ``max_batch_work`` bounds and what the turns
        count. With ``timeout`` the job is admitted only if it is expected to finish within that
        many seconds without making an admitted job miss its deadline (:meth:`refusal`), else its
        future fails at once with :class:`Overloaded`. Cancelling the future drops the job's items
        not yet run, and stops a batch whose jobs are all cancelled.
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
            self._seq += 1
            job.seq = self._seq
            if timeout is not None:
                job.admitted = time.monotonic()
                job.deadline = job.admitted + timeout
                refused = self.refusal(job)
                if refused is not None:
                    job.future.set_exception(refused)
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

    def _large(self, work: float) -> bool:
        """Whether a batch of ``work`` is large: at least ``max_batch_work / 8``."""
        return not math.isfinite(self.max_batch_work) or work >= self.max_batch_work / 8

    def work_per_second(self) -> float | None:
        """The large work done per second while busy, recently (None before a batch was timed):
        the work of the large batches (:meth:`_large`) over their time plus that of the small
        batches run meanwhile, so that the share of the thread that small requests take (they go
        first) is counted; before a large batch has run, the work per second of any batch (small
        ones pay a per-batch cost: a cautious figure)."""
        work, seconds = self._rate if self._rate[0] > 0 else self._rate_any
        return work / seconds if work > 0 and seconds > 0 else None

    def _active(self) -> list[Job]:
        """The unfinished jobs: waiting, or with items in a running batch (call with the lock held)."""
        running = [job for frame in list(self._stack) for job, _, _ in frame.slices]
        return [job for job in dict.fromkeys([*self._jobs, *running]) if not job.future.done()]

    def refusal(self, job: Job) -> Overloaded | None:
        """Why ``job`` cannot be admitted now, or None (call with the lock held): at the recent work
        per second, the work done before it is finished (:func:`finish_work`, plus the batches
        running unless it will run nested in them) would take it past its deadline, or its work
        would take an admitted job that is on time past that job's (not checked for a job that
        will nest in the running batch: it delays the others by a sliver, and a small request is
        not refused for a large one's sake). The expected times are taken ``caution`` times
        (1.25: a job is admitted when it is expected within 80 % of its time, which leaves room for
        the small requests that will come first), and more while the recent large jobs took
        longer than expected (a machine that other work slowed down: the measured ratio, decayed,
        :meth:`_learn`). Nothing is refused before a batch
        has been timed (the first batch is not: it pays the model's first-call costs), nor when
        nothing else is waiting or running."""
        rate = self.work_per_second()
        active = self._active()
        if rate is None or not active:  # not timed yet, or idle: it starts at once
            job.expected = None if rate is None else job.work / rate
            return None
        caution = self.caution * max(1.0, self._overrun)
        stack = list(self._stack)
        nests = bool(stack) and len(stack) < self.max_depth and job.priority() < stack[-1].priority  # runs within the running batch
        running = 0.0 if nests else sum(frame.work for frame in stack)
        now = time.monotonic()
        retry_after = (sum(j.work - j.served for j in active) + running) / rate  # at the rate measured
        job.expected = (finish_work(job, active) + running) / rate
        expected = now + caution * job.expected
        if expected > job.deadline:
            return Overloaded(f"the server is busy: about {expected - now:.0f} s of work before this request is done, over its {job.deadline - now:.0f} s", retry_after)
        for other in [] if nests else active:  # a job that nests delays the others by a sliver: never refused for them
            if math.isfinite(other.deadline):
                before = now + caution * (finish_work(other, active) + running) / rate
                if before <= other.deadline < before + caution * min(job.work, other.work) / rate:
                    return Overloaded("the server is busy: this request would make an earlier one miss its time", retry_after)
        return None

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
                    self._small_seconds = 0.0  # idle: the small batches so far delayed no large one
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
            if time.monotonic() >= job.deadline:  # timed out: it took its whole time at least
                self._learn(job, job.deadline - job.admitted)

    def _learn(self, job: Job, seconds: float) -> None:
        """Fold a large admitted job's ``seconds`` over its expected seconds into the overrun
        that raises the admission's caution (decayed: the recent jobs count most)."""
        if job.expected is not None and self._large(job.work):
            with self._cond:
                self._overrun = 0.7 * self._overrun + 0.3 * seconds / max(job.expected, 1e-3)

    def _next_job(self, exclude: set[Job]) -> Job | None:
        """The waiting job outside ``exclude`` whose turn it is (call with the lock held)."""
        self._drop_gone()
        return min((job for job in self._jobs if job not in exclude), key=Job.priority, default=None)

    def _take(self, exclude: set[Job]) -> tuple[Hashable, list[Slice], tuple[float, int], float] | None:
        """The next batch (call with the lock held): the job whose turn it is (outside
        ``exclude``) gives the key; then, in turn order, the items of the jobs with that key until
        ``max_batch`` items or ``max_batch_work`` (at least one item), leaving out items of over
        twice the leading item's work (and over ``max_batch_work / 16``). Returns the key, the
        slices, the leading job's priority and the batch's work."""
        head = self._next_job(exclude)
        if head is None:
            return None
        key, priority, slices, n, work = head.key, head.priority(), [], 0, 0.0
        similar = max(2 * head.costs[head.taken], self.max_batch_work / 16 if math.isfinite(self.max_batch_work) else 0.0)
        for job in sorted(self._jobs, key=Job.priority):
            if job in exclude or job.key != key:
                continue
            start = end = job.taken
            while end < len(job.items) and n < self.max_batch and (n == 0 or (work + job.costs[end] <= self.max_batch_work and job.costs[end] <= similar)):
                work += job.costs[end]
                job.served += job.costs[end]
                n, end = n + 1, end + 1
            if end == start:
                if n >= self.max_batch:
                    break
                continue
            job.taken = end
            slices.append((job, start, end))
            if end == len(job.items):
                self._jobs.remove(job)
        return key, slices, priority, work

    def _run_next(self, exclude: set[Job]) -> bool:
        """Take and run one batch of jobs outside ``exclude``; False if there was none."""
        with self._cond:
            taken = self._take(exclude)
        if taken is None:
            return False
        self._execute(*taken)
        return True

    def _execute(self, key: Hashable, slices: list[Slice], priority: tuple[float, int] = (0.0, 0), work: float = 0.0) -> None:
        items = [item for job, start, end in slices for item in job.items[start:end]]
        self.stats["batches"] += 1
        self.stats["jobs"] += len(slices)
        self.stats["items"] += len(items)
        started = time.monotonic()
        frame = _Frame(slices, started, priority, work)
        self._stack.append(frame)
        error: BaseException | None = None
        try:
            results = self.handler(key, items, self._checkpoint)
            if len(results) != len(items):
                error = RuntimeError(f"the handler gave {len(results)} results for {len(items)} items")
        except BaseException as e:  # noqa: BLE001 -- handed to the caller, never kills the thread
            error = e
        finally:
            self._stack.pop()
        wall = time.monotonic() - started
        if error is None and work > 0 and self._warm:  # decayed sums: the recent batches count most
            with self._cond:
                self._rate_any = (0.8 * self._rate_any[0] + work, 0.8 * self._rate_any[1] + max(wall - frame.nested, 1e-6))
                if self._large(work):
                    self._rate = (0.8 * self._rate[0] + work, 0.8 * self._rate[1] + max(wall - frame.nested_large + self._small_seconds, 1e-6))
                    self._small_seconds = 0.0
                elif not self._stack:
                    self._small_seconds += wall
        self._warm = True
        if isinstance(error, Cancelled):
            for job, _, _ in slices:
                self._abandon(job, ShuttingDown("the server is shutting down"))
        elif error is not None and len(slices) == 1:
            self._abandon(slices[0][0], error)
        elif error is not None:  # find the job at fault: each part alone
            for job, start, end in slices:
                if job.future.cancelled():
                    self._count_cancelled(job)
                else:
                    self._execute(key, [(job, start, end)], priority, sum(job.costs[start:end]))
        else:
            at = 0
            for job, start, end in slices:
                job.results[start:end] = results[at : at + end - start]
                at, job.finished = at + end - start, job.finished + end - start
                if job.future.cancelled():
                    self._count_cancelled(job)
                elif job.finished == len(job.items):
                    _settle(job.future.set_result, job.results)
                    if math.isfinite(job.deadline):
                        self._learn(job, time.monotonic() - job.admitted)

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
        with self._cond:
            waiting = self._next_job(exclude)
            taken = self._take(exclude) if waiting is not None and waiting.priority() < frame.priority else None
        if taken is not None:
            started = time.monotonic()
            self._execute(*taken)
            now = time.monotonic()
            frame.nested += now - started
            if self._large(taken[3]):
                frame.nested_large += now - started
            frame.since = now
            self._check(frame)

    def _check(self, frame: _Frame) -> None:
        if time.monotonic() >= self._abort_at:
            raise Cancelled("the shutdown grace is over")
        if all(job.future.done() for job, _, _ in frame.slices):
            raise Cancelled("every request of this batch is gone")
