"""TensorBoard event files written in the training thread (issue 49): a full disk stops TensorBoard
logging with one message naming the file, and training goes on."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from syntaxnmt.errors import UserError
from syntaxnmt.training import events
from syntaxnmt.training.events import EventLog
from syntaxnmt.training.train import train


class FillsUp:
    """A file on a disk with ``room`` bytes left: a write beyond them fails with ENOSPC."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def a_full_disk(monkeypatch, room: int) -> None:
    monkeypatch.setattr(events, "open", lambda path, mode: FillsUp(open(path, mode), room), raising=False)


def test_the_event_file_holds_the_scalars_tensorboard_reads(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = EventLog(tmp_path / "tb", print)
    for step in (1, 2, 3):
        log.add_scalar("train/loss", 10.0 / step, step)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars("train/loss")] == [(1, 10.0), (2, 5.0), (3, 3.3333)]


def test_a_full_disk_during_train_stops_tensorboard_in_one_message_naming_its_file(make_config, monkeypatch):
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    a_full_disk(monkeypatch, room=600)  # the file's first records fit, then the disk is full
    cfg = make_config({"train": {"max_steps": 6, "valid_every": 6, "log_every": 1, "tensorboard": True}})
    messages = []
    assert train(cfg, log=messages.append).step == 6  # training went on to its end
    event_file = next((Path(cfg.work_dir) / "tensorboard").glob("events.out.tfevents.*"))
    stopped = [m for m in messages if "TensorBoard" in m]
    assert stopped == [f"{event_file}: cannot write (No space left on device): TensorBoard logging stopped, training goes on"]
    assert 0 < event_file.stat().st_size <= 600 and b"train/loss" in event_file.read_bytes()
    assert (Path(cfg.work_dir) / "best.pt").is_file() and thread_errors == []


def test_a_tensorboard_folder_that_cannot_be_made_is_one_error_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=rf"^{tmp_path}/file/tb/events\.out\.tfevents\.\S+: cannot write the TensorBoard log"):
        EventLog(tmp_path / "file" / "tb", print)
