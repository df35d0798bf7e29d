"""syntaxnmt.cpu.threads: the thread policy and its watch, the short OpenMP spin, the kernels' threads."""

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_cli import run_cli, subprocess_env

from syntaxnmt.__main__ import openmp_defaults
from syntaxnmt.cpu import threads
from syntaxnmt.cpu.threads import busy_cores, configure_threads, describe_threads, in_threads, policy_threads
from syntaxnmt.errors import UserError

# ---------------------------------------------------------------- the thread policy


@pytest.fixture
def restore_threads(monkeypatch):
    """torch's threads and the policy's state as they were: later tests in this process run with
    the count conftest set, and no later training watches threads the policy chose here."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_policy_cores", threads._policy_cores)
    monkeypatch.setattr(threads, "_threads_note", threads._threads_note)
    monkeypatch.setattr(threads, "_watch", threads._watch)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "cores, load, expected",
    [(2, 0.0, 2), (2, 0.49, 2), (2, 0.5, 1), (2, 1.3, 1), (2, 2.0, 1), (2, 7.5, 1), (1, 0.0, 1), (1, 3.0, 1), (16, 3.6, 12), (16, 0.2, 16), (8, 8.4, 1)],
)
def test_the_policy_leaves_the_cores_other_processes_use(cores, load, expected):
    assert policy_threads(cores, load) == expected


def test_configure_threads_follows_the_policy_and_says_why(restore_threads):
    assert configure_threads(None, environ={}, cores=2, load=1.2) == 1
    assert torch.get_num_threads() == 1
    assert describe_threads().startswith("1 thread of 2 cores (busy machine: other load 1.2; --threads N to choose)")
    assert configure_threads(0, environ={}, cores=2, load=0.1) == 2  # 0: not given
    assert torch.get_num_threads() == 2 and describe_threads() == "2 threads of 2 cores"


def test_a_requested_count_wins_over_the_load_and_over_omp_num_threads(restore_threads):
    assert configure_threads(3, environ={"OMP_NUM_THREADS": "1"}, cores=2, load=5.0) == 3
    assert torch.get_num_threads() == 3 and describe_threads() == "3 threads as requested"
    assert configure_threads(None, environ={"OMP_NUM_THREADS": "2"}, cores=2, load=5.0) == 2  # the user's environment
    assert configure_threads(None, environ={"OMP_NUM_THREADS": "many"}, cores=4, load=1.0) == 3  # not a count: the policy
    with pytest.raises(UserError, match=r"--threads -1: give at least 1"):
        configure_threads(-1)


def test_busy_cores_sees_a_busy_process():
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"])
    try:
        busy = busy_cores(0.5)
    finally:
        spin.kill()
        spin.wait()
    if busy is None:
        pytest.skip("no /proc/stat")
    assert 0.6 <= busy <= len(os.sched_getaffinity(0)) + 0.1


def test_train_threads_as_requested_or_by_the_policy(capsys, make_config, tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "cpu_cores", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda cores: (1.0, "fake load"))
    path = tmp_path / "exp.yaml"
    make_config({"train": {"max_steps": 1, "valid_every": 1}}).save(path)
    code, out, err = run_cli(capsys, "train", path)
    assert code == 0, err
    assert "device cpu, 1 thread of 2 cores (busy machine: fake load; --threads N to choose)" in out + err
    code, out, err = run_cli(capsys, "train", path, "--resume", "--train.max_steps=2", "--threads", "2")
    assert code == 0, err
    assert "device cpu, 2 threads as requested" in out + err and torch.get_num_threads() == 2
    code, out, err = run_cli(capsys, "train", path, "--resume", "--train.max_steps=3", "--train.threads=3")
    assert code == 0, err
    assert "device cpu, 3 threads as requested" in out + err and torch.get_num_threads() == 3


class _Machine:
    """A fake 2-CPU machine for :class:`threads.ThreadWatch`: seconds pass, this process and the
    others use CPU time, and /proc/stat counts both (100 ticks a second)."""

    def __init__(self):
        self.now = self.own = self.busy = 0.0

    def run(self, seconds: float, own_cores: float, other_cores: float) -> None:
        self.now += seconds
        self.own += seconds * own_cores
        self.busy += seconds * min(2.0, own_cores + other_cores)

    def jiffies(self, cpus) -> tuple[int, int]:
        return int(self.busy * 100), int(self.now * 2 * 100)


def test_thread_watch_gives_a_core_back_when_a_job_starts_and_takes_it_again_when_it_ends(monkeypatch, restore_threads):
    m, said = _Machine(), []
    monkeypatch.setattr(threads, "_cpu_jiffies", m.jiffies)
    torch.set_num_threads(2)
    watch = threads.ThreadWatch(2, 30.0, cpus=[0, 1], clock=lambda: m.now, cpu_clock=lambda: m.own)
    m.run(29, own_cores=2, other_cores=0)
    assert watch.poll(said.append) is None  # not yet half a minute
    m.run(2, own_cores=2, other_cores=0)
    assert watch.poll(said.append) is None and torch.get_num_threads() == 2  # quiet: nothing changes, nothing said
    m.run(30, own_cores=1.1, other_cores=1.0)  # a job starts: ours get preempted
    assert watch.poll(said.append) == 1 and torch.get_num_threads() == 1
    assert said == ["threads 2 -> 1: other processes kept 0.9 of 2 cores busy over the last 30 s (--threads N to fix the count)"]
    m.run(30, own_cores=1.0, other_cores=1.0)  # still there: one thread stays
    assert watch.poll(said.append) is None and torch.get_num_threads() == 1
    m.run(30, own_cores=1.0, other_cores=0.0)  # the job ended
    assert watch.poll(said.append) == 2 and torch.get_num_threads() == 2 and said[-1].startswith("threads 1 -> 2: other processes kept 0.0 of 2 cores")


def test_only_threads_the_policy_chose_are_watched(restore_threads):
    configure_threads(None, environ={}, cores=2, load=0.0)
    watch = threads.ThreadWatch.for_this_process()
    if watch is None:
        pytest.skip("no /proc/stat")
    assert watch.cores == 2 and watch.interval == threads.THREAD_WATCH_SECONDS
    configure_threads(2, environ={}, cores=2, load=0.0)
    assert threads.ThreadWatch.for_this_process() is None
    configure_threads(None, environ={"OMP_NUM_THREADS": "2"}, cores=2, load=0.0)
    assert threads.ThreadWatch.for_this_process() is None


@pytest.fixture
def busy_then_quiet(monkeypatch, restore_threads):
    """A 2-core machine a command finds busy when it starts (other load 1.0: one thread), and
    quiet at every later look (/proc/stat counts only this process), which comes after every
    update or batch (a 0 s interval)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "cpu_cores", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda cores: (1.0, "fake load"))
    monkeypatch.setattr(threads, "THREAD_WATCH_SECONDS", 0.0)
    quiet = lambda cpus: (int(time.process_time() * 1e6), int(time.perf_counter() * 2e6))  # noqa: E731
    monkeypatch.setattr(threads, "_cpu_jiffies", quiet)


def test_training_applies_the_thread_policy_as_the_load_changes(capsys, make_config, tmp_path, busy_then_quiet):
    """Started beside a busy process (1 thread of 2); the process ends, and the run takes both cores."""
    path = tmp_path / "exp.yaml"
    make_config({"train": {"max_steps": 2, "valid_every": 2}}).save(path)
    code, out, err = run_cli(capsys, "train", path)
    assert code == 0, err
    assert "device cpu, 1 thread of 2 cores (busy machine: fake load" in out + err
    assert "threads 1 -> 2: other processes kept 0.0 of 2 cores busy" in out + err and torch.get_num_threads() == 2


def test_translation_applies_the_thread_policy_between_batches(capsys, caplog, trained_run, corpus, tmp_path, busy_then_quiet):
    """``translate`` started beside a busy process (1 thread of 2); the process ends, and the next
    batches take both cores (one batch each); the output is the one of a fixed thread count."""
    checkpoint, src = Path(trained_run.work_dir) / "best.pt", corpus["test"]["src"]
    args = ["translate", "--checkpoint", checkpoint, "-i", src, "--decode.batch_size=2"]
    with caplog.at_level(logging.INFO, logger="syntaxnmt"):
        code, watched, err = run_cli(capsys, *args, "-o", tmp_path / "watched.txt")
    assert code == 0, err
    said = [r.getMessage() for r in caplog.records]
    assert "device cpu, 1 thread of 2 cores (busy machine: fake load; --threads N to choose)" in said, said
    assert any(line.startswith("threads 1 -> 2: other processes kept 0.0 of 2 cores busy") for line in said), said
    assert torch.get_num_threads() == 2
    code, _, err = run_cli(capsys, *args, "-o", tmp_path / "fixed.txt", "--threads=1")
    assert code == 0, err
    assert (tmp_path / "watched.txt").read_text(encoding="utf-8") == (tmp_path / "fixed.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------- short OpenMP spinning, set before torch loads


def test_openmp_defaults_keep_what_the_user_set():
    both = {"GOMP_SPINCOUNT": "3000", "OPENBLAS_THREAD_TIMEOUT": "4"}
    assert openmp_defaults({}) == both
    assert openmp_defaults({"OMP_WAIT_POLICY": ""}) == both  # empty: unset
    assert openmp_defaults({"OMP_WAIT_POLICY": "ACTIVE"}) == {"OPENBLAS_THREAD_TIMEOUT": "4"}
    assert openmp_defaults({"GOMP_SPINCOUNT": "300000"}) == {"OPENBLAS_THREAD_TIMEOUT": "4"}
    assert openmp_defaults({"GOTO_THREAD_TIMEOUT": "20"}) == openmp_defaults({"OPENBLAS_THREAD_TIMEOUT": "20"}) == {"GOMP_SPINCOUNT": "3000"}


def _openmp_display(argv: list[str], **env: str) -> str:
    """libgomp's settings as it read them when torch loaded it (OMP_DISPLAY_ENV=verbose)."""
    environ = {k: v for k, v in subprocess_env().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env={**environ, "OMP_DISPLAY_ENV": "verbose", **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    if "OPENMP DISPLAY ENVIRONMENT" not in proc.stderr or "GOMP_SPINCOUNT" not in proc.stderr:
        pytest.skip("torch's OpenMP runtime is not libgomp")
    return proc.stderr


def test_the_command_makes_openmp_threads_spin_briefly_unless_the_user_chose():
    assert "GOMP_SPINCOUNT = '300000'" in _openmp_display(["-c", "import torch"])  # torch alone: spin ~3 ms at every barrier
    shown = _openmp_display(["-m", "syntaxnmt", "--version"])
    assert "GOMP_SPINCOUNT = '3000'" in shown and "300000" not in shown
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in _openmp_display(["-m", "syntaxnmt", "--version"], OMP_WAIT_POLICY="ACTIVE")


def test_in_threads_runs_in_a_forked_child():
    """A child forked after the shared pool started has no pool threads: its parts must still run
    (the pool is forgotten at fork), not wait forever."""
    import signal as _signal

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen: list[tuple[int, int]] = []
        in_threads(lambda a, b: seen.append((a, b)), 100)  # starts the pool
        assert sorted(seen) == [(0, 50), (50, 100)]
        pid = os.fork()
        if pid == 0:  # the child: killed by the alarm if a part never runs
            _signal.alarm(20)
            parts: list[tuple[int, int]] = []
            in_threads(lambda a, b: parts.append((a, b)), 100)
            os._exit(0 if sorted(parts) == [(0, 50), (50, 100)] else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        torch.set_num_threads(before)
