"""Checkpoint averaging: keep the last N periodic checkpoints of a run and average their weights.

Averaging the parameters of the last few checkpoints of one run smooths the noise of the last
updates (Vaswani et al. 2017, Sec. 6.1: "averaging the last 5 checkpoints, written at 10-minute
intervals"; Junczys-Dowmunt et al. 2016). With ``train.keep_checkpoints: N`` every validation also
writes ``work_dir/checkpoints/step-<update>.pt`` (config, weights and progress -- no optimizer) and
deletes the oldest beyond N; ``syntaxnmt average-checkpoints`` averages them into one checkpoint
that ``syntaxnmt translate --checkpoint`` reads like any other.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import torch

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.errors import UserError
from syntaxnmt.textio import check_outputs

PERIODIC_DIR = "checkpoints"
_STEP_FILE = re.compile(r"^step-(\d+)\.pt$")


def periodic_checkpoints(work_dir: str | Path) -> list[Path]:
    """The periodic checkpoints of a run, oldest first."""
    folder = Path(work_dir) / PERIODIC_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.pt") if (m := _STEP_FILE.match(p.name))] if folder.is_dir() else []
    return [p for _, p in sorted(found)]


def keep_periodic(work_dir: str | Path, state: dict[str, Any], step: int, keep: int) -> Path:
    """Write the weights of ``state`` as the periodic checkpoint of update ``step``, then delete the
    oldest so that ``keep`` remain. Returns the new file's path."""
    path = Path(work_dir) / PERIODIC_DIR / f"step-{step:08d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, {k: state[k] for k in ("config", "model", "progress", "assets") if k in state})  # assets: the tokenizers
    for old in periodic_checkpoints(work_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]], names: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """The element-wise mean of model state dicts with the same keys and shapes (accumulated in
    float64, cast back); integer buffers are taken from the last. ``names`` label the inputs in errors."""
    if not states:
        raise UserError("average-checkpoints: no checkpoint to average")
    names = list(names) or [f"checkpoint {i + 1}" for i in range(len(states))]
    first = states[0]
    for name, sd in zip(names[1:], states[1:]):
        if sd.keys() != first.keys():
            diff = sorted(set(sd) ^ set(first))[:3]
            raise UserError(f"{name}: its parameters differ from {names[0]}'s ({', '.join(diff)}): not the same model")
        bad = [k for k in first if sd[k].shape != first[k].shape]
        if bad:
            raise UserError(f"{name}: parameter {bad[0]} has shape {tuple(sd[bad[0]].shape)}, {names[0]} has {tuple(first[bad[0]].shape)}")
    out = {}
    for key, value in first.items():
        if value.is_floating_point():
            total = sum(sd[key].double() for sd in states)
            out[key] = (total / len(states)).to(value.dtype)
        else:
            out[key] = states[-1][key].clone()
    return out


def average_checkpoints(paths: Sequence[str | Path], output: str | Path) -> dict[str, Any]:
    """Average the weights of ``paths`` into ``output`` (config and progress of the last input);
    returns the written state."""
    if not paths:
        raise UserError("average-checkpoints: no checkpoint to average")
    check_outputs([("-o", output)], [("an input", p) for p in paths])  # the average never replaces a checkpoint it reads
    states = [load_checkpoint(p) for p in paths]
    for p, s in zip(paths, states):
        if "model" not in s or "config" not in s:
            raise UserError(f"{p}: not a syntaxnmt model checkpoint (no 'model' or 'config')")
    for p, s in zip(paths[1:], states[1:]):  # weights of the same shapes may belong to models of different configs
        first, other = states[0]["config"].get("model", {}), s["config"].get("model", {})
        differ = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        if differ:
            shown = ", ".join(f"model.{k} {first.get(k)!r} vs {other.get(k)!r}" for k in differ[:3])
            raise UserError(f"{p}: not the same model as {paths[0]} ({shown}): average checkpoints of one run")
    averaged = {
        "config": states[-1]["config"],
        "model": average_state_dicts([s["model"] for s in states], [str(p) for p in paths]),
        "progress": states[-1].get("progress", {}),
        "averaged_from": [str(p) for p in paths],
        **({"assets": states[-1]["assets"]} if "assets" in states[-1] else {}),  # the tokenizers travel along
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(output, averaged)
    return averaged


def last_periodic(work_dir: str | Path, n: int | None) -> list[Path]:
    """The last ``n`` (all when None) periodic checkpoints of a run; an error when there are none or fewer."""
    found = periodic_checkpoints(work_dir)
    if not found:
        raise UserError(f"{Path(work_dir) / PERIODIC_DIR}: no periodic checkpoints (train with train.keep_checkpoints: N)")
    if n is not None and n > len(found):
        raise UserError(f"average-checkpoints: asked for the last {n} checkpoints, {Path(work_dir) / PERIODIC_DIR} has {len(found)}")
    return found[-n:] if n else found
