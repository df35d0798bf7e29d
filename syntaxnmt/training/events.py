"""TensorBoard event files of a training run (``train.tensorboard``), written in the calling thread.

torch's ``SummaryWriter`` writes from a thread of its own: a full disk there was a traceback of
that thread, then an error naming no file in the training loop. :class:`EventLog` writes each
record itself (the TFRecord framing of TensorBoard's ``RecordWriter``) and flushes it; a write
that fails -- a full disk, a removed folder -- stops TensorBoard logging with one message naming
the event file, and training goes on: its checkpoints name their own file when they cannot be
written, and nothing is lost if space is freed meanwhile.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Callable

from syntaxnmt.errors import UserError


class EventLog:
    """Scalars in a new TensorBoard event file under ``folder`` (made if needed), named as
    ``SummaryWriter`` names it (``events.out.tfevents.TIME.HOST.PID.0``); ``log`` gets the one
    message that says logging stopped. A folder that cannot be written at the start is a
    :class:`UserError` naming the file (training has not begun)."""

    def __init__(self, folder: str | os.PathLike, log: Callable[[str], object]):
        from tensorboard.summary.writer.record_writer import RecordWriter  # deferred: TensorBoard loads only when train.tensorboard is on

        self.path = Path(folder) / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.0"
        self._log = log
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "wb")
        except OSError as e:
            raise UserError(f"{self.path}: cannot write the TensorBoard log ({e.strerror or e}); or set train.tensorboard false") from None
        self._records = RecordWriter(self._file)
        self._write(file_version="brain.Event:2")

    stopped_by: str = ""
    """Why logging stopped (empty while it goes on)."""

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        """Log ``value`` of ``tag`` at update ``step`` (nothing once logging has stopped)."""
        from torch.utils.tensorboard.summary import scalar  # deferred, as above

        if self._file is not None:
            self._write(step=int(step), summary=scalar(tag, float(value)))

    def _write(self, **fields) -> None:
        from tensorboard.compat.proto.event_pb2 import Event  # deferred, as above

        try:
            self._records.write(Event(wall_time=time.time(), **fields).SerializeToString())
            self._file.flush()
        except OSError as e:
            self.stopped_by = e.strerror or str(e)
            self.close()
            self._log(f"{self.path}: cannot write ({self.stopped_by}): TensorBoard logging stopped, training goes on")

    def close(self) -> None:
        """Close the file; what it cannot write any more (a full disk) is dropped quietly, once said."""
        f, self._file = self._file, None
        if f is None:
            return
        try:
            f.close()
        except OSError:  # the buffer's last bytes: the disk is full, which _write has said
            pass
