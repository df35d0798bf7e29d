"""Tests for training: the loss, the learning-rate schedule, checkpoints, exact resumption, stopping."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import quiet

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.config import CPU_SHAPE_BUCKET, TrainConfig, load_config
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD
from syntaxnmt.training.losses import label_smoothed_nll
from syntaxnmt.training.optim import build_optimizer, inverse_sqrt
from syntaxnmt.training.train import train


def _params(work_dir, name: str = "last.pt") -> dict:
    return load_checkpoint(Path(work_dir) / name)


def _assert_same_state(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def _tmp_files(directory) -> list[Path]:
    return [p for p in Path(directory).rglob("*") if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- loss


def test_label_smoothed_loss_matches_hand_computation():
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4], [5.0, 1.0, 1.0, 1.0]]])
    target = torch.tensor([[1, 3, PAD]])  # the last position is padding and must not count
    eps = 0.1

    def log_softmax(row):
        z = math.log(sum(math.exp(x) for x in row))
        return [x - z for x in row]

    exp_loss = exp_nll = 0.0
    for row, y in zip(logits[0].tolist()[:2], [1, 3]):
        lp = log_softmax(row)
        nll = -lp[y]
        smooth = -sum(lp) / len(lp)  # eps spread uniformly over the 4 classes
        exp_nll += nll
        exp_loss += (1 - eps) * nll + eps * smooth

    loss, nll = label_smoothed_nll(logits, target, eps)
    assert loss.item() == pytest.approx(exp_loss, rel=1e-6)
    assert nll.item() == pytest.approx(exp_nll, rel=1e-6)
    assert not nll.requires_grad
    # The same definition as PyTorch's cross-entropy with label smoothing.
    ref = torch.nn.functional.cross_entropy(logits[0], target[0], ignore_index=PAD, label_smoothing=eps, reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)

    plain, plain_nll = label_smoothed_nll(logits, target, 0.0)
    assert plain.item() == pytest.approx(exp_nll, rel=1e-6) == plain_nll.item()


def test_loss_gradient_flows_and_ignores_padding():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    target = torch.tensor([[4, 1, PAD], [PAD, PAD, PAD]])
    loss, _ = label_smoothed_nll(logits, target, 0.2)
    loss.backward()
    assert torch.all(logits.grad[0, 2] == 0) and torch.all(logits.grad[1] == 0)
    assert logits.grad[0, :2].abs().sum() > 0


# ---------------------------------------------------------------- schedule


def test_inverse_sqrt_schedule():
    warmup, peak = 4, 0.01
    model = torch.nn.Linear(2, 2)
    opt, sched = build_optimizer(model, TrainConfig(lr=peak, warmup_steps=warmup, adam_betas=(0.9, 0.98)))
    used = []
    for _ in range(16):
        used.append(opt.param_groups[0]["lr"])  # the rate of the next (1-based) update
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        sched.step()
    expected = [peak * min(s / warmup, math.sqrt(warmup / s)) for s in range(1, 17)]
    assert used == pytest.approx(expected, rel=1e-9)
    assert used[0] == pytest.approx(peak / warmup)
    assert max(used) == pytest.approx(peak) and used.index(max(used)) == warmup - 1  # peak at update `warmup`
    assert used[4 * warmup - 1] == pytest.approx(peak / 2)  # 1/sqrt decay
    f = inverse_sqrt(100)
    assert f(99) == pytest.approx(1.0) and f(0) == pytest.approx(0.01) and f(399) == pytest.approx(0.5)


# ---------------------------------------------------------------- a trained run


def test_trained_run_writes_checkpoints_and_no_temp_files(trained_run):
    work = Path(trained_run.work_dir)
    assert (work / "last.pt").is_file() and (work / "best.pt").is_file()
    assert _tmp_files(work) == [] and _tmp_files(trained_run.prepared_dir) == []
    state = _params(work)
    assert state["progress"]["step"] == 12
    assert {"model", "optimizer", "scheduler", "progress", "rng", "config"} <= state.keys()
    assert (work / "dev.hyp").is_file()


def test_resolved_config_is_saved_and_reloads_equal(make_config, monkeypatch, tmp_path):
    monkeypatch.setenv("SNMT_TEST_RUNS", str(tmp_path / "runs"))
    cfg = make_config({"work_dir": "${SNMT_TEST_RUNS}/env_run", "train": {"max_steps": 2, "valid_every": 2, "lr": 1e-3, "adam_betas": [0.85, 0.99]}})
    assert cfg.work_dir == str(tmp_path / "runs" / "env_run")
    train(cfg, log=quiet)
    saved = Path(cfg.work_dir) / "config.yaml"
    assert saved.is_file()
    assert "${" not in saved.read_text()  # resolved
    monkeypatch.delenv("SNMT_TEST_RUNS")
    assert load_config(saved) == cfg


def test_training_again_without_resume_is_a_user_error(trained_run):
    before = (Path(trained_run.work_dir) / "last.pt").stat().st_mtime_ns
    with pytest.raises(UserError, match="resume"):
        train(trained_run, log=quiet)
    assert (Path(trained_run.work_dir) / "last.pt").stat().st_mtime_ns == before


@pytest.mark.parametrize("accum_steps", [1, 2])
def test_resume_is_exact(make_config, accum_steps):
    def cfg(max_steps, work_dir=None):
        extra = {"train": {"max_steps": max_steps, "valid_every": 3, "accum_steps": accum_steps, "max_tokens": 1500}}
        return make_config(extra, work_dir=work_dir)

    full = cfg(12)
    prog_full = train(full, log=quiet)
    assert prog_full.step == 12 and prog_full.epoch >= 1  # the run crosses an epoch boundary

    half = cfg(6)
    assert train(half, log=quiet).step == 6
    state_half = _params(half.work_dir)
    assert state_half["progress"]["step"] == 6
    prog_resumed = train(cfg(12, work_dir=Path(half.work_dir)), resume=True, log=quiet)

    a, b = _params(full.work_dir), _params(half.work_dir)
    _assert_same_state(a, b)
    with pytest.raises(AssertionError):
        _assert_same_state(a, state_half)  # (the comparison can fail)
    for key in ("step", "epoch", "batch_pos", "best", "bad_validations"):
        assert getattr(prog_full, key) == getattr(prog_resumed, key), key
    opt_a, opt_b = a["optimizer"]["state"], b["optimizer"]["state"]
    assert opt_a.keys() == opt_b.keys()
    for k in opt_a:
        assert torch.equal(opt_a[k]["exp_avg_sq"], opt_b[k]["exp_avg_sq"])
    assert a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == 12
    _assert_same_state(_params(full.work_dir, "best.pt"), _params(half.work_dir, "best.pt"))


def test_same_seed_same_parameters(make_config):
    runs = [make_config({"train": {"max_steps": 4, "valid_every": 4}}) for _ in range(2)]
    other = make_config({"seed": 2, "train": {"max_steps": 4, "valid_every": 4}})
    for cfg in (*runs, other):
        train(cfg, log=quiet)
    _assert_same_state(_params(runs[0].work_dir), _params(runs[1].work_dir))
    with pytest.raises(AssertionError):
        _assert_same_state(_params(runs[0].work_dir), _params(other.work_dir))


def test_resume_without_checkpoint_starts_a_new_run(make_config):
    messages = []
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    assert train(cfg, resume=True, log=messages.append).step == 2
    assert any("starting a new run" in m for m in messages)
    assert (Path(cfg.work_dir) / "last.pt").is_file()


def test_tensorboard_event_file(make_config):
    cfg = make_config({"train": {"max_steps": 3, "valid_every": 3, "log_every": 1, "tensorboard": True}})
    train(cfg, log=quiet)
    events = list((Path(cfg.work_dir) / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    data = events[0].read_bytes()
    assert b"train/loss" in data and b"valid/loss" in data and b"valid/bleu" in data


def test_early_stopping_with_patience(make_config):
    # lr 0: the model never changes, so the dev BLEU never improves after the first validation.
    messages = []
    cfg = make_config({"train": {"lr": 0.0, "max_steps": 30, "valid_every": 2, "patience": 2, "valid_max_sentences": 5}})
    prog = train(cfg, log=messages.append)
    assert prog.step == 6  # validations at 2 (best), 4 and 6 (no improvement) -> stop
    assert prog.bad_validations == 2
    assert any("early stopping" in m for m in messages)
    assert _params(cfg.work_dir)["progress"]["step"] == 6
    assert _params(cfg.work_dir, "best.pt")["progress"]["step"] == 2


def test_time_limit_saves_a_resumable_checkpoint(make_config):
    cfg = make_config({"train": {"max_minutes": 1e-6, "max_steps": 50, "valid_every": 50}})
    messages = []
    prog = train(cfg, log=messages.append)
    assert prog.step == 1 and any("max_minutes" in m for m in messages)
    assert _params(cfg.work_dir)["progress"]["step"] == 1
    resumed = make_config({"train": {"max_steps": 3, "valid_every": 50}}, work_dir=Path(cfg.work_dir))
    assert train(resumed, resume=True, log=quiet).step == 3


def test_corrupt_checkpoint_is_a_user_error(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="broken.pt"):
        load_checkpoint(path)
    with pytest.raises(UserError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "ok.pt", {"x": torch.arange(3)})
    assert torch.equal(load_checkpoint(tmp_path / "ok.pt")["x"], torch.arange(3))
    assert _tmp_files(tmp_path) == []


def test_bf16_autocast_trains_close_to_fp32(make_config):
    """``train.precision=bf16``: same run, bf16 matrix products; float32 weights and losses."""
    fp32 = make_config({"train": {"max_steps": 3, "valid_every": 3, "valid_bleu": False}})
    bf16 = make_config({"train": {"max_steps": 3, "valid_every": 3, "valid_bleu": False, "precision": "bf16"}})
    a, b = train(fp32, log=quiet), train(bf16, log=quiet)
    sa, sb = _params(fp32.work_dir)["model"], _params(bf16.work_dir)["model"]
    assert all(t.dtype == torch.float32 for t in sb.values() if t.is_floating_point())
    assert not all(torch.equal(sa[k], sb[k]) for k in sa)  # bf16 products change the numbers ...
    assert b.best == pytest.approx(a.best, rel=0.05)  # ... but not the dev loss much


def test_training_with_static_shapes_runs_and_resumes(make_config):
    """``train.shape_bucket``: bucketed static batch shapes through the whole loop, and resume."""
    cfg = make_config({"train": {"max_steps": 4, "valid_every": 2, "valid_bleu": False, "shape_bucket": 8}})
    prog = train(cfg, log=quiet)
    assert prog.step == 4 and prog.best is not None and prog.train_tokens > 0
    cfg.train.max_steps = 6
    assert train(cfg, resume=True, log=quiet).step == 6


def test_a_cpu_update_on_bucketed_shapes_equals_one_on_the_batch_itself(make_config):
    """CPU default: batches padded to a few static shapes, linears on oneDNN, the loss over the
    real target tokens -- the same loss and the same (clipped) gradients in an update as the
    unbucketed batch (its own shape, linears on MKL)."""
    from syntaxnmt.model import linear as fast_linear
    from syntaxnmt.training.distributed import World
    from syntaxnmt.training.step import update
    from syntaxnmt.training.train import SingleModel

    cfg = make_config({"model": {"dropout": 0.0}, "train": {"warmup_steps": 1}})
    initial = SingleModel(cfg, World(), torch.device("cpu"), log=quiet).raw.state_dict()
    results = []
    for bucket in (0, CPU_SHAPE_BUCKET):
        task = SingleModel(cfg, World(), torch.device("cpu"), log=quiet)  # fresh optimizer, same weights
        task.raw.load_state_dict(initial)
        t = task.t.model_copy(update={"shape_bucket": bucket})
        kernels = []
        task.raw.register_forward_pre_hook(lambda _, args: kernels.append((fast_linear.TRAIN, tuple(args[0].src.shape))))
        stats = update(task.raw, task.opt, task.sched, task.split, [np.arange(12)], t, torch.device("cpu"))
        results.append((float(stats["loss"]), stats["tokens"], [p.grad for p in task.raw.parameters()], *kernels[0]))
    (l0, n0, g0, onednn0, shape0), (l1, n1, g1, onednn1, shape1) = results
    assert shape1[0] > shape0[0] == 12 and shape1[1] % CPU_SHAPE_BUCKET == 0  # padded rows and positions
    assert not onednn0 and onednn1 == fast_linear.enabled()
    assert n0 == n1 and l1 == pytest.approx(l0, rel=1e-5)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    assert not fast_linear.TRAIN  # only inside the update


def test_cuda_graphs_need_static_shapes_and_are_off_on_cpu(make_config):
    with pytest.raises(UserError, match="shape_bucket"):
        make_config({"train": {"cuda_graphs": True, "shape_bucket": 0}})
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2, "valid_bleu": False, "cuda_graphs": True}})
    messages = []
    assert train(cfg, log=messages.append).step == 2
    assert any("cuda_graphs: off" in m for m in messages)


def test_automatic_gpu_settings_are_decided_per_device(make_config):
    t = make_config().train  # precision auto, cuda_graphs and shape_bucket unset
    cpu, cuda, ddp = t.for_device("cpu"), t.for_device("cuda"), t.for_device("cuda", processes=2)
    assert (cpu.precision, cpu.cuda_graphs, cpu.shape_bucket) == ("fp32", False, CPU_SHAPE_BUCKET) and CPU_SHAPE_BUCKET > 0
    assert (cuda.precision, cuda.cuda_graphs, cuda.shape_bucket) == ("tf32", True, 8)
    assert (ddp.cuda_graphs, ddp.shape_bucket) == (False, 0)
    pinned = make_config({"train": {"precision": "bf16", "shape_bucket": 16, "cuda_graphs": False}}).train.for_device("cuda")
    assert (pinned.precision, pinned.cuda_graphs, pinned.shape_bucket) == ("bf16", False, 16) and pinned.uses_bf16("cuda")


@pytest.mark.parametrize("sig, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_signal_saves_last_checkpoint_and_exits_128_plus_signal(make_config, tmp_path, sig, status):
    """A signal is not a finished run: ``last.pt`` is saved, then the command exits 130 (Ctrl-C)
    or 143 (SIGTERM), as a shell reports a killed command, with one line saying so."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    cfg = make_config({"train": {"max_steps": 100000, "valid_every": 100000, "log_every": 1, "threads": 1}})
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    err_path = tmp_path / "stderr.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "syntaxnmt", "train", str(path)], stdout=subprocess.DEVNULL, stderr=err, env=env)
    deadline = time.monotonic() + 120
    while " 2/100000 " not in err_path.read_text(errors="replace"):  # the bar has passed update 2
        assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text(errors="replace")
        time.sleep(0.1)
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(timeout=120) == status
    last = err_path.read_text(errors="replace").strip().splitlines()[-1]
    assert last == f"syntaxnmt: interrupted by {sig}: {cfg.work_dir}/last.pt saved; continue with --resume"
    assert load_checkpoint(Path(cfg.work_dir) / "last.pt")["progress"]["stop_reason"] == "interrupted"
    assert not _tmp_files(cfg.work_dir)


def test_time_budget_before_the_first_validation_still_leaves_a_best_checkpoint(make_config):
    """On a slow machine the budget can end before update ``valid_every``: the stop validates, so
    there is a ``best.pt``; a re-run with the budget spent trains no further."""
    cfg = make_config({"train": {"max_minutes": 1e-6, "max_steps": 1000, "valid_every": 1000}})
    messages = []
    prog = train(cfg, log=messages.append)
    assert prog.step == 1 and prog.stop_reason == "max_minutes" and prog.validated_step == 1
    assert any(m.startswith("update 1 | dev loss") for m in messages)
    assert _params(cfg.work_dir, "best.pt")["progress"]["step"] == 1
    again = train(cfg, resume=True, log=quiet)
    assert again.step == 1 and again.stop_reason == "max_minutes"


def test_rerun_recovers_a_run_that_stopped_without_best_checkpoint(make_config):
    """A run of an older version stopped by its time budget before any validation (``last.pt``,
    no ``best.pt``): resuming it with the budget spent validates and writes ``best.pt``."""
    cfg = make_config({"train": {"max_minutes": 1e-6, "max_steps": 1000, "valid_every": 1000}})
    train(cfg, log=quiet)
    work = Path(cfg.work_dir)
    (work / "best.pt").unlink()
    state = load_checkpoint(work / "last.pt")
    del state["progress"]["validated_step"]  # as an older checkpoint, which had not validated
    state["progress"].update(best=None, bad_validations=0)
    save_checkpoint(work / "last.pt", state)
    prog = train(cfg, resume=True, log=quiet)
    assert prog.step == 1 and (work / "best.pt").is_file()
