"""Distributed training: 2 CPU processes under torchrun (gloo) equal one process with the same global batch."""

import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from conftest import tiny_tree


def _config(corpus, prepared: Path, work: Path, accum: int) -> Path:
    tree = tiny_tree(corpus, work, prepared)
    tree["model"]["dropout"] = 0.0  # dropout masks differ per rank; everything else must agree
    tree["train"].update({"accum_steps": accum, "max_steps": 4, "valid_every": 100, "valid_bleu": False, "threads": 1, "max_tokens": 600})
    path = work.parent / f"{work.name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]


def test_two_processes_match_one_process_with_the_same_global_batch(corpus, tmp_path):
    prepared = tmp_path / "prepared"
    single = _config(corpus, prepared, tmp_path / "single", accum=2)
    ddp = _config(corpus, prepared, tmp_path / "ddp", accum=1)
    _run([sys.executable, "-m", "syntaxnmt", "train", str(single)], tmp_path)
    _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531", "-m", "syntaxnmt", "train", str(ddp)], tmp_path)
    a = torch.load(tmp_path / "single" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "ddp" / "last.pt", weights_only=False)
    assert a["progress"]["step"] == b["progress"]["step"] == 4
    for name, p in a["model"].items():
        torch.testing.assert_close(b["model"][name], p, rtol=1e-4, atol=1e-5, msg=name)
    # the comparison is sensitive: one process with half the global batch ends elsewhere
    half = _config(corpus, prepared, tmp_path / "half", accum=1)
    _run([sys.executable, "-m", "syntaxnmt", "train", str(half)], tmp_path)
    c = torch.load(tmp_path / "half" / "last.pt", weights_only=False)
    assert any(not torch.allclose(c["model"][n], p, rtol=1e-4, atol=1e-5) for n, p in a["model"].items())
