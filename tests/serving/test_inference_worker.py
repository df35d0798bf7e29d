"""The inference thread: results go back to the right caller, waiting jobs are batched by key,
a failing job fails alone, and the thread stops and restarts cleanly."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from syntaxnmt.serving.worker import BatchingWorker


class Recorder:
    """A handler that records its calls (thread, key, items) and can be held at a gate."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[str, object, list]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on = fail_on

    def __call__(self, key, items):
        self.calls.append((threading.current_thread().name, key, list(items)))
        self.entered.set()
        self.gate.wait(10)
        if self.fail_on in items:
            raise ValueError(f"cannot handle {self.fail_on}")
        return [f"{key}:{x}" for x in items]


def hold_worker(worker: BatchingWorker, rec: Recorder):
    """Keep the worker busy with a first job, so that the next submissions wait together."""
    rec.gate.clear()
    first = worker.submit("k", ["first"])
    assert rec.entered.wait(10)
    return first


def test_results_go_to_their_caller_in_order():
    worker = BatchingWorker(Recorder())
    futures = [worker.submit("k", [f"{i}a", f"{i}b"]) for i in range(20)]
    assert [f.result(10) for f in futures] == [[f"k:{i}a", f"k:{i}b"] for i in range(20)]
    worker.close(10)


def test_waiting_jobs_with_the_same_key_run_as_one_batch():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch=100)
    first = hold_worker(worker, rec)
    a = worker.submit("k", ["a1", "a2"])
    other = worker.submit("other", ["o"])
    b = worker.submit("k", ["b"])
    rec.gate.set()
    assert first.result(10) == ["k:first"]
    assert a.result(10) == ["k:a1", "k:a2"] and b.result(10) == ["k:b"] and other.result(10) == ["other:o"]
    assert [(key, items) for _, key, items in rec.calls] == [("k", ["first"]), ("k", ["a1", "a2", "b"]), ("other", ["o"])]
    assert {name for name, _, _ in rec.calls} == {"syntaxnmt-inference"}
    assert worker.stats == {"batches": 3, "jobs": 4, "items": 5}
    worker.close(10)


def test_a_batch_never_exceeds_max_batch_but_a_large_job_runs_whole():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch=3)
    first = hold_worker(worker, rec)
    jobs = [worker.submit("k", [f"{i}x", f"{i}y"]) for i in range(3)] + [worker.submit("k", list("abcde"))]
    rec.gate.set()
    for f in [first, *jobs]:
        f.result(10)
    sizes = [len(items) for _, _, items in rec.calls[1:]]
    assert sizes == [2, 2, 2, 5]
    worker.close(10)


def test_a_failing_job_fails_alone_and_the_worker_goes_on():
    rec = Recorder(fail_on="bad")
    worker = BatchingWorker(rec)
    first = hold_worker(worker, rec)
    good1, bad, good2 = worker.submit("k", ["g1"]), worker.submit("k", ["x", "bad"]), worker.submit("k", ["g2"])
    rec.gate.set()
    first.result(10)
    assert good1.result(10) == ["k:g1"] and good2.result(10) == ["k:g2"]
    with pytest.raises(ValueError, match="cannot handle bad"):
        bad.result(10)
    assert worker.submit("k", ["after"]).result(10) == ["k:after"]
    worker.close(10)


def test_cancelled_jobs_are_skipped():
    rec = Recorder()
    worker = BatchingWorker(rec)
    first = hold_worker(worker, rec)
    gone = worker.submit("k", ["gone"])
    assert gone.cancel()
    kept = worker.submit("k", ["kept"])
    rec.gate.set()
    first.result(10)
    assert kept.result(10) == ["k:kept"]
    assert all("gone" not in items for _, _, items in rec.calls)
    worker.close(10)


def test_close_finishes_queued_jobs_and_a_later_submit_restarts():
    rec = Recorder()
    worker = BatchingWorker(rec)
    first = hold_worker(worker, rec)
    queued = worker.submit("k", ["queued"])
    closer = threading.Thread(target=worker.close, args=(10,))
    closer.start()
    rec.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert first.result(0) == ["k:first"] and queued.result(0) == ["k:queued"]
    assert worker.submit("k", ["again"]).result(10) == ["k:again"]
    worker.close(10)


def test_many_threads_submitting_at_once_each_get_their_own_answer():
    worker = BatchingWorker(Recorder(), max_batch=16)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: worker.submit(i % 3, [i, i + 1000]).result(10), range(300)))
    assert answers == [[f"{i % 3}:{i}", f"{i % 3}:{i + 1000}"] for i in range(300)]
    worker.close(10)
