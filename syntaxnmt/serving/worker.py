"""One thread that owns the model: every call to it is made there, requests waiting together are batched.

PyTorch modules (and spaCy pipelines) are not safe to call from several threads at once, and a
web server must not run a search on its event loop. :class:`BatchingWorker` takes jobs from any
thread (``submit`` returns a :class:`concurrent.futures.Future`, which asyncio code awaits with
``asyncio.wrap_future``), and its single thread runs them. The jobs that are queued when the
thread comes back for more and share a key (e.g. ``("translate", beam)``) are concatenated into
one call, so fifty concurrent one-sentence requests cost one batched search, not fifty.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[Hashable, list], list]
"""``handler(key, items) -> results``: one result per item, in order."""


@dataclass
class Job:
    key: Hashable
    items: list
    future: Future = field(default_factory=Future)


class BatchingWorker:
    """Run ``handler`` on one thread over batches of the jobs submitted from any thread.

    A batch holds the queued jobs with the same key, up to ``max_batch`` items (a job is never
    split, so one larger job runs alone). When a batch of several jobs fails, each job is re-run
    alone, so only the job at fault gets the exception.
    """

    def __init__(self, handler: Handler, max_batch: int = 64, name: str = "syntaxnmt-inference"):
        self.handler, self.max_batch, self.name = handler, max_batch, name
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._held: list[Job] = []  # taken from the queue but left for the next batch (other key, or full)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.stats = {"batches": 0, "jobs": 0, "items": 0}  # written by the worker thread only

    def submit(self, key: Hashable, items: Sequence[Any]) -> Future:
        """Queue a job; its future gets the handler's results for ``items`` (or its exception)."""
        job = Job(key, list(items))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put(job)
        return job.future

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the thread (a later ``submit`` starts a new one)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._execute(batch)

    def _next_batch(self) -> list[Job] | None:
        """Block for a job, then take the waiting jobs with the same key (None: stop)."""
        if not self._held:
            first = self._queue.get()
            if first is None:
                return None
            self._held.append(first)
        while True:  # move everything waiting into the held list (FIFO kept)
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:  # stop after the held jobs are done
                self._queue.put(None)
                break
            self._held.append(job)
        key, batch, rest, size = self._held[0].key, [], [], 0
        for job in self._held:
            if job.key == key and (not batch or size + len(job.items) <= self.max_batch):
                batch.append(job)
                size += len(job.items)
            else:
                rest.append(job)
        self._held = rest
        return batch

    def _execute(self, batch: list[Job]) -> None:
        batch = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not batch:
            return
        self.stats["batches"] += 1
        self.stats["jobs"] += len(batch)
        self.stats["items"] += sum(len(job.items) for job in batch)
        try:
            results = self.handler(batch[0].key, [item for job in batch for item in job.items])
        except BaseException as e:  # noqa: BLE001 -- handed to the caller, never kills the thread
            if len(batch) == 1:
                batch[0].future.set_exception(e)
                return
            for job in batch:
                self._execute_alone(job)
            return
        start = 0
        for job in batch:
            job.future.set_result(results[start : start + len(job.items)])
            start += len(job.items)

    def _execute_alone(self, job: Job) -> None:
        try:
            job.future.set_result(self.handler(job.key, job.items))
        except BaseException as e:  # noqa: BLE001
            job.future.set_exception(e)
