"""The training loop shared by ``syntaxnmt train`` (one model) and ``train-joint`` (two models).

The loop owns what every trainer needs -- the stream of token-bucketed batches, the update
budget (``max_steps``, ``max_epochs``, ``max_minutes``), the progress bar, logging to the bar
and to TensorBoard, validation every ``valid_every`` updates, early stopping, and the
SIGINT/SIGTERM stop at an update boundary -- and asks a :class:`Task` for the rest: how to
make one update, how to validate and how to save. Progress (update, epoch, position in the
data order, time, tokens) is saved with every checkpoint, so an interrupted run resumes exactly.
"""

from __future__ import annotations

import math
import random
import signal
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from syntaxnmt.config import TrainConfig
from syntaxnmt.cpu.threads import ThreadWatch
from syntaxnmt.data.batches import TokenBatchSampler
from syntaxnmt.errors import Interrupted, UserError
from syntaxnmt.training.distributed import World, broadcast_flag, sum_across


@dataclass
class Progress:
    """Where training stands; saved in checkpoints."""

    step: int = 0
    epoch: int = 0
    batch_pos: int = 0  # next batch of ``epoch`` to train on
    best: float | None = None
    bad_validations: int = 0
    train_seconds: float = 0.0
    train_tokens: int = 0  # target tokens trained on (for tokens/s)
    stop_reason: str = ""  # why the last session stopped: max_steps, max_epochs, early stopping, max_minutes, interrupted
    validated_step: int = -1  # the update validated last (-1: none, or a checkpoint older than this field)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The random generators' states (python, numpy, torch, CUDA) as plain numbers, lists and
    tensors, which ``torch.load(weights_only=True)`` reads back (a numpy array would not load)."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    numpy_state = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state(saved) -> tuple:
    """``np.random.set_state``'s tuple from :func:`rng_state`'s dict (or the tuple itself, as
    checkpoints written before that dict hold it)."""
    if not isinstance(saved, dict):
        return tuple(saved)
    keys = saved["keys"].numpy() if isinstance(saved["keys"], torch.Tensor) else np.asarray(saved["keys"])
    return (saved["kind"], keys.astype(np.uint32), int(saved["pos"]), int(saved["has_gauss"]), float(saved["cached_gaussian"]))


def set_rng_state(state: dict) -> None:
    """Restore the states saved by :func:`rng_state`."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    np.random.set_state(_numpy_state(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class StopFlag:
    """Turns the first SIGINT/SIGTERM into a request to stop at the next update boundary
    (a second one stops at once); remembers which signal it was."""

    def __init__(self):
        self.signal: int | None = None
        self._old = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def __enter__(self):
        def handler(signum, frame):
            if self.requested:  # second signal: stop now
                raise Interrupted(signum)
            self.signal = signum

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Task(Protocol):
    """What the loop trains."""

    progress: Progress

    @property
    def bad_validations(self) -> int:
        """Validations in a row without improvement (early stopping reads this)."""

    def update(self, group: list[np.ndarray], step: int) -> dict[str, float]:
        """One optimizer update on the batches ``group``; returns summed statistics, ``tokens``
        (target tokens of the update) among them."""

    def summarize(self, window: dict[str, float]) -> dict[str, float]:
        """Per-token figures of the statistics summed since the last log line."""

    def validate(self) -> None:
        """Validate, update ``progress.best``/``bad_validations`` and save the checkpoints."""

    def save(self) -> None:
        """Save ``last.pt`` (an interrupted or timed-out run)."""


@dataclass
class LoopResult:
    stop_reason: str
    signal: int | None = None


def run(task: Task, t: TrainConfig, sampler: TokenBatchSampler, log: Callable, *, world: World = World(), writer=None, desc: str = "train") -> LoopResult:
    """Train ``task`` until its budget is spent, validation stops it early, or a signal arrives.

    Every stop but a signal ends with a validation of the last update (unless it was just
    validated), so a time budget always leaves a ``best.pt``, however slow the machine; a run
    resumed with its time budget spent validates and stops without training further.

    A loss that is not finite stops training with a :class:`~syntaxnmt.errors.UserError`
    (``train.max_nonfinite``): the loop looks at the summed losses when it logs, and before it
    validates or saves, so no checkpoint is written from a diverged model and no update waits for
    the device. With ``max_nonfinite`` N > 0 the update itself skips a non-finite step
    (:func:`~syntaxnmt.training.step.skip_nonfinite`) and N + 1 skipped in a row stop training."""
    prog = task.progress
    stream = sampler.stream(prog.epoch, prog.batch_pos, t.max_epochs)
    bar = Budget(t, prog, desc, disable=not world.is_main)
    window: dict[str, float] = {}
    window_start = time.perf_counter()
    watch = Divergence(task, t, world, prog.step + 1)
    session_start = time.perf_counter() - prog.train_seconds
    threads = None if world.distributed else ThreadWatch.for_this_process()  # the thread policy, applied as the load changes
    result = LoopResult("max_minutes" if bar.spent() else "max_steps")
    try:
        with StopFlag() as stop:
            while prog.step < t.max_steps and result.stop_reason != "max_minutes":
                group = [b for _, b in zip(range(t.accum_steps), stream)]
                if len(group) < t.accum_steps:
                    result.stop_reason = "max_epochs"
                    break
                stats = task.update([idx for _, _, idx in group], prog.step)
                last_epoch, last_pos, _ = group[-1]
                prog.step, prog.epoch, prog.batch_pos = prog.step + 1, last_epoch, last_pos + 1
                prog.train_seconds = time.perf_counter() - session_start
                if stats.get("skipped"):
                    watch.skipped(prog.step, log)
                else:
                    watch.in_a_row = 0
                    prog.train_tokens += int(stats["tokens"])
                    for k, v in stats.items():
                        window[k] = window.get(k, 0.0) + v
                bar.advance()
                if threads is not None:
                    threads.poll(log)
                if prog.step % t.log_every == 0 or prog.step == 1:
                    figures = watch.check(window, prog.step)
                    _log_window(figures, window, time.perf_counter() - window_start, prog, bar, writer)
                    window, window_start, watch.window_first = {}, time.perf_counter(), prog.step + 1
                if broadcast_flag(world, stop.requested or bar.spent()):  # every rank stops at the same update
                    result = LoopResult("interrupted" if stop.requested else "max_minutes", stop.signal)
                    break
                if prog.step % t.valid_every == 0:
                    watch.check(window, prog.step)
                    if world.is_main:
                        prog.validated_step = prog.step
                        task.validate()
                    if broadcast_flag(world, bool(t.patience) and task.bad_validations >= t.patience):
                        result.stop_reason = "early stopping"
                        break
    finally:
        bar.close()
    watch.check(window, prog.step)  # before the last save
    prog.stop_reason = result.stop_reason
    if world.is_main:
        if result.stop_reason == "interrupted":
            task.save()
        elif prog.validated_step != prog.step:
            prog.validated_step = prog.step
            task.validate()
    return result


class Divergence:
    """Watches for a training loss that is not finite (``train.max_nonfinite``, docs/robustness.md).

    :meth:`check` reads the losses summed since the last log line -- a sum holds NaN or inf when
    any of its updates did -- at the moments the loop reads the device anyway (logging, before a
    validation or a save); :meth:`skipped` counts the updates that the step skipped itself."""

    def __init__(self, task: Task, t: TrainConfig, world: World, window_first: int):
        self.task, self.t, self.world = task, t, world
        self.window_first = window_first  # the first update of the current window
        self.in_a_row = 0

    def check(self, window: dict, step: int) -> dict[str, float]:
        """The window's per-token figures (``task.summarize``); a :class:`UserError` on every rank
        when one of them is not finite."""
        figures = self.task.summarize(window) if window else {}
        bad = {k: v for k, v in figures.items() if not math.isfinite(v)}
        if sum_across(self.world, float(bool(bad))) > 0:
            where = f"of update {step}" if self.window_first >= step else f"summed over updates {self.window_first}-{step}"
            shown = ", ".join(f"{k} {v}" for k, v in bad.items()) or "on another process"
            raise UserError(
                f"training diverged: the loss {where} is not finite ({shown}); no checkpoint was written from it. "
                f"Lower train.lr ({self.t.lr:g}) or raise train.warmup_steps ({self.t.warmup_steps}); train.max_nonfinite N skips up to N such updates in a row"
            )
        return figures

    def skipped(self, step: int, log: Callable) -> None:
        """The update ``step`` was skipped (a non-finite loss or gradient); too many in a row stop training."""
        self.in_a_row += 1
        log(f"update {step}: the loss or gradients are not finite: update skipped ({self.in_a_row} in a row, train.max_nonfinite {self.t.max_nonfinite})")
        if self.in_a_row > self.t.max_nonfinite:
            raise UserError(
                f"training diverged: the loss or gradients were not finite in {self.in_a_row} updates in a row (updates {step - self.in_a_row + 1}-{step}), "
                f"more than train.max_nonfinite {self.t.max_nonfinite}; they were skipped, so the checkpoints hold finite weights. Lower train.lr ({self.t.lr:g}) or raise train.warmup_steps ({self.t.warmup_steps})"
            )


class Budget:
    """The progress bar of the budget that ends the run: training seconds of ``max_minutes`` when
    it is set (with the update count beside it), else updates of ``max_steps``."""

    def __init__(self, t: TrainConfig, prog: Progress, desc: str, disable: bool = False):
        self.prog, self.seconds = prog, 60 * t.max_minutes
        self.figures: dict[str, str] = {}
        if self.seconds:
            total = max(1, round(self.seconds))
            fmt = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}{postfix}]"
            self.bar = tqdm(total=total, initial=min(total, int(prog.train_seconds)), desc=desc, bar_format=fmt, dynamic_ncols=True, mininterval=1.0, disable=disable)
        else:
            self.bar = tqdm(total=t.max_steps, initial=prog.step, desc=desc, unit="upd", dynamic_ncols=True, mininterval=1.0, disable=disable)

    def spent(self) -> bool:
        return bool(self.seconds) and self.prog.train_seconds >= self.seconds

    def advance(self) -> None:
        """One update made."""
        if not self.seconds:
            self.bar.update(1)
            return
        self.show(self.figures, refresh=False)
        self.bar.update(min(self.bar.total, int(self.prog.train_seconds)) - self.bar.n)

    def show(self, figures: dict[str, str], refresh: bool = True) -> None:
        """The latest training figures beside the bar (after the update count, on a time bar)."""
        self.figures = figures
        self.bar.set_postfix({"upd": self.prog.step, **figures} if self.seconds else figures, refresh=refresh)

    def close(self) -> None:
        self.bar.close()


def raise_if_interrupted(result: LoopResult, saved: str) -> None:
    """After a stop by a signal (the checkpoints ``saved`` are written), end the command with
    :class:`~syntaxnmt.errors.Interrupted`: exit status 130 (SIGINT) or 143 (SIGTERM), not 0."""
    if result.stop_reason == "interrupted":
        signum = result.signal or signal.SIGTERM  # another rank received it
        raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name}: {saved} saved; continue with --resume")


def _log_window(figures: dict[str, float], window: dict[str, float], elapsed: float, prog: Progress, bar: Budget, writer) -> None:
    tok_s = window.get("tokens", 0.0) / max(elapsed, 1e-9)
    bar.show({**{k: f"{v:.3f}" if abs(v) >= 0.01 else f"{v:.2e}" for k, v in figures.items()}, "tok_s": f"{tok_s:.0f}", "ep": str(prog.epoch)})
    if writer:
        for k, v in figures.items():
            writer.add_scalar(f"train/{k}", v, prog.step)
        writer.add_scalar("train/tokens_per_s", tok_s, prog.step)
