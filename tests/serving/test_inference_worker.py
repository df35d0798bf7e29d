"""The inference thread: results go back to the right caller, waiting jobs are batched by key,
a large job is cut into batches taken in turn with the others', a small job overtakes a long
search at its checkpoints, cancelled jobs stop, a failing job fails alone, and the thread stops
(within a grace period) and restarts cleanly."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor

import pytest

from syntaxnmt.serving.worker import BatchingWorker, Cancelled, Overloaded, ShuttingDown


class Recorder:
    """A handler that records its calls (thread, key, items) and can be held at a gate."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[str, object, list]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on = fail_on

    def __call__(self, key, items, checkpoint):
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
    assert worker.stats == {"batches": 3, "jobs": 4, "items": 5, "cancelled": 0}
    worker.close(10)


def test_a_batch_never_exceeds_max_batch_and_jobs_take_turns():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch=3)
    first = hold_worker(worker, rec)
    jobs = [worker.submit("k", [f"{i}x", f"{i}y"]) for i in range(3)] + [worker.submit("k", list("abcde"))]
    rec.gate.set()
    assert [f.result(10) for f in jobs] == [[f"k:{i}x", f"k:{i}y"] for i in range(3)] + [[f"k:{c}" for c in "abcde"]]
    # job 0 fills the first batch with job 1's first item; job 1's second item comes after
    # jobs 2 and 3 had their turn (a job that gave items goes to the back of the line)
    assert [items for _, _, items in rec.calls[1:]] == [["0x", "0y", "1x"], ["2x", "2y", "a"], ["1y", "b", "c"], ["d", "e"]]
    first.result(10)
    worker.close(10)


def test_a_large_job_is_cut_by_work_and_a_later_small_one_finishes_first():
    """Round-robin by work: the big job's batches alternate with the small job's."""
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch=64, max_batch_work=10)
    first = hold_worker(worker, rec)
    big = worker.submit("k", [f"b{i}" for i in range(8)], costs=[4] * 8)  # 32 units: 4 batches of 2
    small = worker.submit("k", ["s"], costs=[7])  # 7 + 4 > 10: alone
    rec.gate.set()
    assert small.result(10) == ["k:s"] and big.result(10) == [f"k:b{i}" for i in range(8)]
    first.result(10)
    assert [items for _, _, items in rec.calls[1:]] == [["b0", "b1"], ["s"], ["b2", "b3"], ["b4", "b5"], ["b6", "b7"]]
    worker.close(10)


def test_one_item_heavier_than_a_batch_runs_alone():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch_work=5)
    assert worker.submit("k", ["huge", "x"], costs=[50, 1]).result(10) == ["k:huge", "k:x"]
    assert [items for _, _, items in rec.calls] == [["huge"], ["x"]]
    worker.close(10)


class Steps:
    """A handler whose item ``"long"`` is a search of many steps, calling the checkpoint before
    each; ``started`` is set at its first step, ``release`` lets its other steps go."""

    def __init__(self, steps: int = 50):
        self.steps, self.log = steps, []
        self.started, self.release = threading.Event(), threading.Event()
        self.stopped_at: int | None = None

    def __call__(self, key, items, checkpoint):
        out = []
        for item in items:
            if item == "long":
                for step in range(self.steps):
                    try:
                        checkpoint()
                    except Cancelled:
                        self.stopped_at = step
                        raise
                    self.log.append(f"long {step}")
                    self.started.set()
                    self.release.wait(10)
                    time.sleep(0.001)
            else:
                checkpoint()
                self.log.append(item)
            out.append(f"{key}:{item}")
        return out


def test_a_small_job_runs_between_the_steps_of_a_long_search():
    handler = Steps()
    worker = BatchingWorker(handler, slice_seconds=0)
    long = worker.submit("k", ["long"], costs=[100])
    assert handler.started.wait(10)
    small = worker.submit("other beam", ["small"])
    handler.release.set()
    assert small.result(10) == ["other beam:small"]
    assert long.result(10) == ["k:long"]
    i = handler.log.index("small")
    assert 0 < i < handler.steps  # inside the long search, not after it
    assert handler.log[:i] == [f"long {s}" for s in range(i)] and handler.log[i + 1 :] == [f"long {s}" for s in range(i, handler.steps)]
    worker.close(10)


def test_no_overtaking_within_the_time_slice():
    handler = Steps(steps=5)
    worker = BatchingWorker(handler, slice_seconds=60)
    long = worker.submit("k", ["long"])
    assert handler.started.wait(10)
    small = worker.submit("k", ["small"])
    handler.release.set()
    assert long.result(10) == ["k:long"] and small.result(10) == ["k:small"]
    assert handler.log == [f"long {s}" for s in range(5)] + ["small"]
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


def test_cancelled_jobs_are_dropped():
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
    assert worker.stats["cancelled"] == 1
    worker.close(10)


def test_the_rest_of_a_cancelled_job_is_dropped():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch=2)
    rec.gate.clear()
    job = worker.submit("k", ["a", "b", "c", "d", "e"])
    assert rec.entered.wait(10)  # its first batch (a, b) is running
    assert job.cancel()
    rec.gate.set()
    after = worker.submit("k", ["after"])
    assert after.result(10) == ["k:after"]
    assert [items for _, _, items in rec.calls] == [["a", "b"], ["after"]]
    assert worker.stats["cancelled"] == 1
    worker.close(10)


def test_cancelling_the_only_job_of_a_search_stops_it_at_its_next_step():
    handler = Steps(steps=10_000)
    worker = BatchingWorker(handler)
    long = worker.submit("k", ["long"])
    assert handler.started.wait(10)
    assert long.cancel()
    handler.release.set()
    assert worker.submit("k", ["next"]).result(10) == ["k:next"]  # the thread is free again
    assert handler.stopped_at is not None and handler.stopped_at < 10_000
    assert worker.stats["cancelled"] == 1
    with pytest.raises(CancelledError):
        long.result(0)
    worker.close(10)


def test_a_search_shared_with_a_live_job_goes_on():
    handler = Steps(steps=20)
    worker = BatchingWorker(handler)
    hold = worker.submit("k", ["long"])
    assert handler.started.wait(10)
    gone, kept = worker.submit("k", ["long"]), worker.submit("k", ["long"])  # batched together next
    assert gone.cancel() is True
    handler.release.set()
    assert hold.result(10) == ["k:long"] and kept.result(10) == ["k:long"]
    assert handler.stopped_at is None
    worker.close(10)


def test_stop_with_grace_stops_the_search_and_fails_the_queued_jobs():
    handler = Steps(steps=100_000)
    worker = BatchingWorker(handler, slice_seconds=60)  # no nested batch: the queued job waits
    running = worker.submit("k", ["long"])
    assert handler.started.wait(10)
    queued = worker.submit("other", ["queued"])
    handler.release.set()
    t0 = time.monotonic()
    assert worker.close(timeout=10, grace=0.2)
    assert time.monotonic() - t0 < 5
    for f in (running, queued):
        with pytest.raises(ShuttingDown):
            f.result(0)
    assert handler.stopped_at is not None
    assert "queued" not in handler.log
    assert worker.submit("k", ["again"]).result(10) == ["k:again"]  # a later submit starts over
    worker.close(10)


def test_a_stopping_worker_refuses_new_jobs():
    handler = Steps(steps=100_000)
    worker = BatchingWorker(handler, slice_seconds=60)  # no nested batch: the queued job waits
    worker.submit("k", ["long"])
    assert handler.started.wait(10)
    handler.release.set()
    worker.stop(grace=5)
    with pytest.raises(ShuttingDown):
        worker.submit("k", ["late"]).result(1)
    assert worker.close(timeout=10, grace=0)


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


# ---------------------------------------------------------------- fair turns and admission (issue 49)


def test_a_small_job_after_six_heavy_ones_waits_for_the_running_batch_only():
    """Six heavy jobs of two one-batch items each, then a one-item job: it runs right after the
    batch under way, and the heavy jobs take turns batch by batch."""
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch_work=10)
    rec.gate.clear()
    heavy = [worker.submit("k", [f"h{i}a", f"h{i}b"], costs=[8, 8]) for i in range(6)]
    assert rec.entered.wait(10)  # h0a is running
    small = worker.submit("k", ["s"], costs=[1])
    rec.gate.set()
    assert small.result(10) == ["k:s"] and [f.result(10) for f in heavy] == [[f"k:h{i}a", f"k:h{i}b"] for i in range(6)]
    assert [items for _, _, items in rec.calls] == [["h0a"], ["s"]] + [[f"h{i}a"] for i in range(1, 6)] + [[f"h{i}b"] for i in range(6)]
    worker.close(10)


def test_a_long_item_does_not_join_a_short_items_batch():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch_work=100)
    first = hold_worker(worker, rec)
    short, long, short2 = worker.submit("k", ["s1"], costs=[2]), worker.submit("k", ["l"], costs=[60]), worker.submit("k", ["s2"], costs=[3])
    rec.gate.set()
    assert [f.result(10) for f in (first, short, long, short2)] == [["k:first"], ["k:s1"], ["k:l"], ["k:s2"]]
    assert [items for _, _, items in rec.calls] == [["first"], ["s1", "s2"], ["l"]]
    worker.close(10)


class Named(Steps):
    """:class:`Steps` whose items starting with ``L`` are long searches (logged with their name)."""

    def __call__(self, key, items, checkpoint):
        for item in items:
            for step in range(self.steps if item.startswith("L") else 1):
                checkpoint()
                self.log.append(f"{item} {step}" if item.startswith("L") else item)
                self.started.set()
                self.release.wait(10)
        return [f"{key}:{item}" for item in items]


def test_a_small_job_overtakes_a_long_search_but_a_long_one_of_equal_standing_does_not():
    handler = Named(steps=20)
    worker = BatchingWorker(handler, slice_seconds=0)
    first = worker.submit("k", ["L1"], costs=[100])
    assert handler.started.wait(10)
    second = worker.submit("other", ["L2"], costs=[100])
    small = worker.submit("other", ["s"], costs=[1])
    handler.release.set()
    assert [f.result(10) for f in (first, second, small)] == [["k:L1"], ["other:L2"], ["other:s"]]
    i = handler.log.index("s")
    assert 0 < i < 20 and handler.log[:i] == [f"L1 {s}" for s in range(i)]  # inside L1's search
    assert handler.log[i + 1 :] == [f"L1 {s}" for s in range(i, 20)] + [f"L2 {s}" for s in range(20)]  # L2 after L1, not inside
    worker.close(10)


def test_a_job_that_would_not_finish_in_time_is_refused_at_once_with_the_time_to_wait():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch_work=1000)
    first = hold_worker(worker, rec)  # a running batch of work 1
    worker._rate = (100.0, 1.0)  # 100 units of work per second (as if measured)
    h1 = worker.submit("k", ["a", "b"], costs=[400, 400], timeout=11)  # 8 s of work (x 1.25 caution: 10 s): admitted
    late = worker.submit("k", ["c", "d"], costs=[400, 400], timeout=11)  # 16 s with h1's turns: refused
    with pytest.raises(Overloaded, match="busy") as refused:
        late.result(0)
    assert refused.value.retry_after == pytest.approx(8.01, abs=0.01)  # h1's work and the running batch
    small = worker.submit("k", ["s"], costs=[10], timeout=10)  # h1 still done within its 11 s
    pushy = worker.submit("k", ["e", "f"], costs=[400, 400], timeout=60)  # done in 16 s, but h1 would then miss its 11 s
    with pytest.raises(Overloaded, match="earlier one"):
        pushy.result(0)
    rec.gate.set()
    assert first.result(10) == ["k:first"] and h1.result(10) == ["k:a", "k:b"] and small.result(10) == ["k:s"]
    assert all(not {"c", "e"} & set(items) for _, _, items in rec.calls)
    worker.close(10)


def test_nothing_is_refused_before_a_batch_is_timed_nor_on_an_idle_worker():
    rec = Recorder()
    worker = BatchingWorker(rec)
    assert worker.work_per_second() is None
    assert worker.submit("k", ["a"], costs=[10**9], timeout=1e-3).result(10) == ["k:a"]
    assert worker.work_per_second() is None  # the first batch is not timed (first-call costs)
    assert worker.submit("k", ["b"], costs=[10**9], timeout=1e-3).result(10) == ["k:b"]  # idle: admitted
    assert worker.work_per_second() is not None
    worker.close(10)


def test_large_jobs_that_took_longer_than_expected_make_the_admission_more_cautious():
    rec = Recorder()
    worker = BatchingWorker(rec, max_batch_work=1000)
    first = hold_worker(worker, rec)
    worker._rate = (1e9, 1.0)  # as if measured: so fast that any job takes longer than expected
    slow = worker.submit("k", ["a"], costs=[500], timeout=60)  # admitted, expected in microseconds
    time.sleep(0.01)  # it takes longer than that whatever the machine
    rec.gate.set()
    assert first.result(10) == ["k:first"] and slow.result(10) == ["k:a"]
    assert worker._overrun > 2  # 10 ms over an expected 1 ms (the floor): 0.7 + 0.3 x 10 at least
    rec.gate.clear()
    held = worker.submit("k", ["held"], costs=[500])
    assert rec.entered.wait(10)
    worker._rate = (100.0, 1.0)  # 100 units of work per second
    with pytest.raises(Overloaded):
        worker.submit("k", ["b"], costs=[300], timeout=10).result(0)  # 3 s: x 1.25 within 10 s, x 1.25 x 3.7 not
    rec.gate.set()
    assert held.result(10) == ["k:held"]
    worker.close(10)
