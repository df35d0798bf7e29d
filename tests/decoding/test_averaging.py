"""Tests for syntaxnmt.decoding.averaging: periodic checkpoints (train.keep_checkpoints) and their averaging."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import quiet, untrained_checkpoint

from syntaxnmt.checkpoint import load_checkpoint
from syntaxnmt.cli import main
from syntaxnmt.decoding.averaging import average_checkpoints, average_state_dicts, keep_periodic, periodic_checkpoints
from syntaxnmt.errors import UserError
from syntaxnmt.training.train import train


def _run(*argv) -> int:
    try:
        main([str(a) for a in argv])
    except SystemExit as e:
        return int(e.code)
    return 0


def test_averaging_two_identical_checkpoints_returns_the_same_weights(make_config, tmp_path):
    cfg = make_config()
    a = untrained_checkpoint(cfg, tmp_path / "a.pt", seed=3)
    b = untrained_checkpoint(cfg, tmp_path / "b.pt", seed=3)
    averaged = average_checkpoints([a, b], tmp_path / "avg.pt")["model"]
    original = load_checkpoint(a)["model"]
    assert averaged.keys() == original.keys()
    for k in original:
        assert torch.equal(averaged[k], original[k]), k
    assert load_checkpoint(tmp_path / "avg.pt")["config"] == cfg.model_dump(mode="json")


def test_average_is_the_elementwise_mean():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(5)}
    c = {"w": torch.tensor([2.0, 1.0]), "n": torch.tensor(7)}
    out = average_state_dicts([a, b, c])
    assert torch.allclose(out["w"], torch.tensor([2.0, 3.0]))
    assert int(out["n"]) == 7  # integer buffers come from the last


def test_different_models_are_refused():
    with pytest.raises(UserError, match="shape"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}], ["a.pt", "b.pt"])
    with pytest.raises(UserError, match="not the same model"):
        average_state_dicts([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}], ["a.pt", "b.pt"])


def test_keep_periodic_keeps_the_last_n(tmp_path):
    state = {"config": {}, "model": {"w": torch.zeros(1)}, "optimizer": {"big": 1}, "progress": {}}
    for step in (10, 20, 30, 40, 100):
        keep_periodic(tmp_path, state, step, keep=3)
    kept = periodic_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["step-00000030.pt", "step-00000040.pt", "step-00000100.pt"]
    assert "optimizer" not in load_checkpoint(kept[0])


def test_training_keeps_checkpoints_and_the_cli_averages_them(make_config, tmp_path, capsys):
    cfg = make_config({"train": {"max_steps": 8, "valid_every": 2, "keep_checkpoints": 3}})
    train(cfg, log=quiet)
    kept = periodic_checkpoints(cfg.work_dir)
    assert [p.name for p in kept] == ["step-00000004.pt", "step-00000006.pt", "step-00000008.pt"]
    newest, last = load_checkpoint(kept[-1])["model"], load_checkpoint(Path(cfg.work_dir) / "last.pt")["model"]
    assert all(torch.equal(newest[k], last[k]) for k in last)
    cfg.save(tmp_path / "cfg.yaml")
    assert _run("average-checkpoints", tmp_path / "cfg.yaml", "--last", 2) == 0
    out = load_checkpoint(Path(cfg.work_dir) / "averaged.pt")
    last_two = [load_checkpoint(p)["model"] for p in kept[-2:]]
    for k, v in out["model"].items():
        if v.is_floating_point():
            assert torch.allclose(v, (last_two[0][k] + last_two[1][k]) / 2, atol=1e-6), k
    assert "averaged 2 checkpoints" in capsys.readouterr().err
    assert out["assets"]["spm_src"] == load_checkpoint(kept[-1])["assets"]["spm_src"]  # self-contained, like best.pt
    # the averaged checkpoint translates like any other
    src = tmp_path / "in.txt"
    src.write_text("the cat sees a dog\n")
    assert _run("translate", "--checkpoint", Path(cfg.work_dir) / "averaged.pt", "-i", src, "-o", tmp_path / "out.txt", "--device", "cpu") == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 1


def test_cli_errors(make_config, tmp_path, capsys):
    cfg = make_config()
    cfg.save(tmp_path / "cfg.yaml")
    assert _run("average-checkpoints", tmp_path / "cfg.yaml") == 2
    assert "no periodic checkpoints" in capsys.readouterr().err
    assert _run("average-checkpoints", "--inputs", tmp_path / "missing.pt", "-o", tmp_path / "x.pt") == 2
    assert "checkpoint not found" in capsys.readouterr().err
    assert _run("average-checkpoints", "--inputs", tmp_path / "missing.pt") == 2
    assert "-o PATH" in capsys.readouterr().err


def test_keep_checkpoints_must_not_be_negative():
    from syntaxnmt.config import load_config

    with pytest.raises(UserError, match="keep_checkpoints"):
        load_config(None, {"train": {"keep_checkpoints": -1}})


def test_checkpoints_of_different_model_configs_are_refused_naming_the_key(make_config, tmp_path, capsys):
    """Weights of the same shapes under another model config (here: the config says d_model 64)
    were averaged into a checkpoint whose config did not match its weights (issue 25 audit)."""
    from test_cli import assert_one_line_error

    cfg = make_config()
    a = untrained_checkpoint(cfg, tmp_path / "a.pt", seed=1)
    state = load_checkpoint(a)
    state["config"]["model"]["d_model"] = 64
    other = tmp_path / "other.pt"
    torch.save(state, other)
    with pytest.raises(UserError, match="model.d_model 32 vs 64"):
        average_checkpoints([a, other], tmp_path / "avg.pt")
    try:
        main(["average-checkpoints", "--inputs", str(a), str(other), "-o", str(tmp_path / "avg.pt")])
        code = 0
    except SystemExit as e:
        code = e.code
    assert_one_line_error(code, capsys.readouterr().err, str(other), "not the same model")
    assert not (tmp_path / "avg.pt").exists()


def test_the_average_never_replaces_one_of_its_inputs(tmp_path):
    """Issue 49: ``average-checkpoints -o`` onto one of its inputs (with a CONFIG too: a periodic
    checkpoint) replaced it; refused before any checkpoint is read."""
    inputs = [tmp_path / "step-00000006.pt", tmp_path / "step-00000012.pt"]
    for p in inputs:
        p.write_bytes(b"weights")
    with pytest.raises(UserError, match=r"step-00000012.pt: -o is also an input"):
        average_checkpoints(inputs, tmp_path / "." / "step-00000012.pt")
    assert all(p.read_bytes() == b"weights" for p in inputs)
