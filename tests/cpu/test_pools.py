"""Tests for syntaxnmt.cpu.pools: batches searched side by side in threads or forked processes."""

from __future__ import annotations

import os

import pytest
import torch

CPU = torch.device("cpu")


def test_a_search_process_that_dies_is_one_clear_error():
    """A forked search process killed outright (as the out-of-memory killer does) ends the search
    with a :class:`UserError` naming ``decode.processes``; the results of the others reach ``store``
    in the caller's thread, in order, until then."""
    import signal

    import syntaxnmt.cpu.pools as pools
    from syntaxnmt.errors import UserError

    parent = os.getpid()

    def work(batch: int) -> tuple[int, int]:
        if batch == 3 and os.getpid() != parent:  # never this process, should the batch run here
            os.kill(os.getpid(), signal.SIGKILL)
        return batch * 10, os.getpid()

    stored: list[tuple[int, int]] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(UserError, match=r"^decode.processes: a search process died .*decode.processes: false$"):
            for _ in pools.batches_side_by_side(work, list(range(6)), 0, CPU, lambda b, r: stored.append((b, r[0])), processes=True):
                pass
    finally:
        torch.set_num_threads(before)
    assert stored == [(b, 10 * b) for b in range(len(stored))] and len(stored) <= 3
    assert not pools._FORKED  # the pool's work is forgotten


def test_batches_side_by_side_follow_the_thread_policy_as_the_load_changes(monkeypatch):
    """Between batches the policy's watch looks again (:class:`syntaxnmt.cpu.threads.ThreadWatch`): 2
    threads (two batches at once, one thread each), then a busy machine (1 thread: one batch at a
    time on the caller's thread), then quiet again (two at once). Every batch runs once and comes
    back in order across the changes; the count the watch set stays after."""
    import threading
    import time

    import syntaxnmt.cpu.pools as pools

    yielded: list[int] = []
    plan = [(4, 1), (8, 2)]  # (after this many batches, threads)

    class Watch:  # a scripted ThreadWatch: the load changes after the 4th and the 8th batch
        def due(self) -> bool:
            return bool(plan) and len(yielded) >= plan[0][0]

        def poll(self, log):
            if self.due():
                torch.set_num_threads(plan.pop(0)[1])

    ran: dict[int, tuple[str, int]] = {}
    lock = threading.Lock()

    def work(batch: int) -> None:
        with lock:
            assert batch not in ran
            ran[batch] = (threading.current_thread().name, torch.get_num_threads())
        time.sleep(0.01)  # a search takes a while: the pool does not finish every batch before the first look

    monkeypatch.setattr(pools.ThreadWatch, "for_this_process", classmethod(lambda cls: Watch()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for batch in pools.batches_side_by_side(work, list(range(12)), 0, CPU):
            yielded.append(batch)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert yielded == list(range(12)) and sorted(ran) == yielded and not plan and after == 2
    where = ["pool" if name.startswith("syntaxnmt-decode") else "caller" for name, _ in (ran[b] for b in yielded)]
    assert all(threads == 1 for _, threads in ran.values())  # one thread per batch throughout
    first, last = where.index("caller"), len(where) - where[::-1].index("caller")
    assert 4 <= first and where[first:last] == ["caller"] * (last - first) and last == 8  # switched back after the 8th
    assert where[:first] == ["pool"] * first and where[8:] == ["pool"] * 4


def test_decode_workers_default_to_one_per_thread_on_the_cpu_only():
    from syntaxnmt.cpu.pools import decode_workers

    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        assert decode_workers(0, 10, CPU) == (4, 1)  # the default: one batch per thread
        assert decode_workers(0, 3, CPU) == (3, 1)  # no more workers than batches
        assert decode_workers(0, 1, CPU) == (1, 4)  # one batch: all the threads on it
        assert decode_workers(1, 10, CPU) == (1, 4)  # one at a time, as before
        assert decode_workers(2, 10, CPU) == (2, 2)  # the threads shared
        assert decode_workers(0, 10, torch.device("cuda")) == (1, 4)
    finally:
        torch.set_num_threads(before)


def test_decode_workers_is_a_validated_config_key(tmp_path, capsys):
    from syntaxnmt.config import load_config

    assert load_config(None, {"decode": {"workers": 2}}).decode.workers == 2
    with pytest.raises(Exception) as err:
        load_config(None, {"decode": {"workers": -1}})
    assert "decode.workers" in str(err.value)
