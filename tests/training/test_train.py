"""Tests for training: the loss, the learning-rate schedule, checkpoints, exact resumption, stopping."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import quiet
from test_cli import run_cli

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.config import CPU_SHAPE_BUCKET, TrainConfig, load_config
from syntaxnmt.cpu.blas import openblas_available
from syntaxnmt.data.prepare import load_split, load_tokenizers
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import PAD
from syntaxnmt.model import build_model
from syntaxnmt.textio import read_lines
from syntaxnmt.training import joint
from syntaxnmt.training import step as step_module
from syntaxnmt.training.joint import train_joint
from syntaxnmt.training.loop import Progress
from syntaxnmt.training.losses import label_smoothed_nll
from syntaxnmt.training.optim import build_optimizer, inverse_sqrt
from syntaxnmt.training.train import Run, train, validate_and_record


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


def test_cpu_optimizer_is_fused_adam_and_follows_the_formula():
    """On CPU the update is ATen's fused Adam (one kernel for all parameters), and it computes
    Adam (Kingma & Ba 2015, Algorithm 1) with weight decay added to the gradient."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    t = TrainConfig(lr=0.01, warmup_steps=1, adam_betas=(0.9, 0.98), adam_eps=1e-8, weight_decay=0.1)
    opt, _ = build_optimizer(model, t)
    assert opt.param_groups[0]["fused"] is True
    w = model.weight.detach().clone()
    m = torch.zeros_like(w)
    v = torch.zeros_like(w)
    for step in range(1, 4):
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        g = model.weight.grad.detach() + t.weight_decay * w
        m = 0.9 * m + 0.1 * g
        v = 0.98 * v + 0.02 * g * g
        w = w - t.lr * (m / (1 - 0.9**step)) / ((v / (1 - 0.98**step)).sqrt() + t.adam_eps)
        opt.step()
        assert torch.allclose(model.weight.detach(), w, atol=1e-6)



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


def test_validation_decodes_with_the_weights_of_the_update_it_follows(trained_run, corpus, tmp_path, capsys):
    """The last validation (update 12) translated the dev sentences with the model saved then: the
    fused optimizer changes the weights in place, and no cache of decoding may keep those of the
    first validation (update 6)."""
    work = Path(trained_run.work_dir)
    n = trained_run.train.valid_max_sentences
    src = tmp_path / "dev.src"
    src.write_text("".join(line + "\n" for line in Path(corpus["dev"]["src"]).read_text(encoding="utf-8").splitlines()[:n]), encoding="utf-8")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", work / "last.pt", "-i", src, "-o", tmp_path / "dev.hyp", "--beam", "1")
    assert code == 0, err
    assert (tmp_path / "dev.hyp").read_text(encoding="utf-8") == (work / "dev.hyp").read_text(encoding="utf-8")


def test_an_update_bumps_the_version_of_every_weight():
    """ATen's fused Adam writes the weights without bumping their versions; the update does, for
    every cache keyed on them (a HAN's composed maps)."""
    from syntaxnmt.training.optim import build_optimizer

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt, sched = build_optimizer(model, TrainConfig())
    assert opt.defaults["fused"]
    model(torch.randn(5, 4)).sum().backward()
    before = [p._version for p in model.parameters()]
    step_module.apply_gradients(model, opt, sched, TrainConfig())
    assert all(p._version > v for p, v in zip(model.parameters(), before))


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
    from syntaxnmt.cpu import linear as fast_linear
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


# ---------------------------------------------------------------- non-finite losses (issue 25)


def _train_cli(capsys, cfg, tmp_path, *argv) -> tuple[int, str]:
    """``syntaxnmt train`` on ``cfg`` written to a YAML file: (exit status, its last stderr line)."""
    path = tmp_path / f"{Path(cfg.work_dir).name}.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    code, _, err = run_cli(capsys, "train", path, *argv)
    assert "Traceback" not in err
    return code, err.strip().splitlines()[-1] if err.strip() else ""


def _poison(monkeypatch, from_update: int, to_update: int = 10**9, module=None) -> None:
    """Make the training loss NaN in the updates ``from_update``..``to_update`` (1-based), as a
    diverged model gives: the gradients turn NaN too. ``module``: the one whose ``forward_loss``
    is replaced (the update step's by default)."""
    module = module or step_module
    real = step_module.forward_loss

    def forward_loss(model, batch, t, objectives=(), step=0, **kw):
        loss, logs, *rest = real(model, batch, t, objectives, step, **kw)
        if from_update <= int(step) + 1 <= to_update:
            loss = loss * float("nan")
            logs = {**logs, "loss": logs["loss"] * float("nan")}
        return (loss, logs, *rest)

    monkeypatch.setattr(module, "forward_loss", forward_loss)


def test_a_diverged_run_stops_in_one_line_and_writes_no_checkpoint(capsys, make_config, tmp_path):
    """``train.lr`` 1e30 trained 60 updates at loss nan, saved a "new best" and exited 0."""
    cfg = make_config({"train": {"lr": 1e30, "max_steps": 30, "valid_every": 10, "log_every": 5}})
    code, last = _train_cli(capsys, cfg, tmp_path)
    assert code == 2
    assert re.fullmatch(r"syntaxnmt: error: training diverged: the loss (of update 1|summed over updates \d+-\d+) is not finite \(loss nan\); no checkpoint was written from it\. Lower train\.lr \(1e\+30\).*", last), last
    assert not (Path(cfg.work_dir) / "last.pt").exists() and not (Path(cfg.work_dir) / "best.pt").exists()


def test_divergence_after_a_validation_keeps_the_finite_checkpoints(make_config, monkeypatch):
    """The loss turns NaN after update 4 was validated and saved: the loop finds it when it logs
    (update 6), before the next validation, so last.pt and best.pt still hold update 4."""
    _poison(monkeypatch, from_update=5)
    cfg = make_config({"train": {"max_steps": 12, "valid_every": 4, "log_every": 3}})
    with pytest.raises(UserError, match=r"the loss summed over updates 4-6 is not finite \(loss nan\)"):
        train(cfg, log=quiet)
    for name in ("last.pt", "best.pt"):
        state = _params(cfg.work_dir, name)  # load_checkpoint refuses NaN weights
        assert state["progress"]["step"] == 4, name


def test_max_nonfinite_skips_that_many_updates_in_a_row(make_config, monkeypatch):
    """``train.max_nonfinite: 1``: one NaN update is skipped (no optimizer or schedule step) and
    training goes on; two in a row stop it."""
    _poison(monkeypatch, from_update=3, to_update=3)
    messages = []
    cfg = make_config({"train": {"max_steps": 6, "valid_every": 6, "max_nonfinite": 1}})
    assert train(cfg, log=messages.append).step == 6
    assert "update 3: the loss or gradients are not finite: update skipped (1 in a row, train.max_nonfinite 1)" in messages
    state = _params(cfg.work_dir)  # finite weights (load_checkpoint checks)
    assert state["scheduler"]["last_epoch"] == 5  # six updates, one skipped
    assert all(int(s["step"]) == 5 for s in state["optimizer"]["state"].values())

    _poison(monkeypatch, from_update=3, to_update=4)
    cfg = make_config({"train": {"max_steps": 6, "valid_every": 2, "max_nonfinite": 1}})
    with pytest.raises(UserError, match=r"not finite in 2 updates in a row \(updates 3-4\), more than train\.max_nonfinite 1"):
        train(cfg, log=quiet)
    assert _params(cfg.work_dir)["progress"]["step"] == 2


def test_train_joint_stops_on_a_non_finite_loss_and_skips_with_max_nonfinite(make_config, monkeypatch):
    cfg = make_config({"train": {"lr": 1e30, "max_steps": 8, "valid_every": 4, "log_every": 2}})
    with pytest.raises(UserError, match=r"training diverged: the loss (of update \d+|summed over updates \d+-\d+) is not finite \((fwd nan|rev nan|bonus nan)"):
        train_joint(cfg, log=quiet)
    assert not list(Path(cfg.work_dir).rglob("*.pt"))

    _poison(monkeypatch, from_update=2, to_update=2, module=joint)
    messages = []
    cfg = make_config({"train": {"max_steps": 4, "valid_every": 4, "max_nonfinite": 1}})
    assert train_joint(cfg, log=messages.append).step == 4
    assert any(m.startswith("update 2: the loss or gradients are not finite: update skipped") for m in messages)
    for direction in ("forward", "reverse"):  # both directions skipped the same update
        assert load_checkpoint(Path(cfg.work_dir) / direction / "last.pt")["scheduler"]["last_epoch"] == 3


def test_non_finite_weights_are_never_saved_nor_validated_as_best(make_config):
    cfg = make_config()
    toks = load_tokenizers(cfg)
    model = build_model(cfg, **toks.vocab_sizes())
    opt, sched = build_optimizer(model, cfg.train)
    with torch.no_grad():
        model.state_dict()["encoder.0.ffn.fc1.weight"][0, 0] = float("nan")
    prog = Progress(step=7)
    with pytest.raises(UserError, match=r"training diverged: the weights are not finite after update 7 \(.* holds NaN or inf\)"):
        Run(cfg).save(model, opt, sched, prog, is_best=True)
    assert not Path(cfg.work_dir).exists() or not any(Path(cfg.work_dir).iterdir())
    dev = load_split(cfg, "dev")
    with pytest.raises(UserError, match=r"training diverged: the dev loss is nan at update 7"):
        validate_and_record(model, cfg, dev, read_lines(cfg.prepared_dir / "dev.ref"), toks.tgt, torch.device("cpu"), prog, quiet)
    assert prog.best is None


def test_absurd_model_size_is_one_line_naming_the_key(capsys, make_config, tmp_path):
    cfg = make_config()
    code, last = _train_cli(capsys, cfg, tmp_path, "--model.ffn_dim=1000000000000")
    assert code == 2 and last.startswith("syntaxnmt: error: the model of this config cannot be allocated (one tensor needs ")
    assert "model.ffn_dim 1000000000000" in last


# ---------------------------------------------------------------- resuming with another model (issue 25)


@pytest.mark.parametrize("override, shown", [({"heads": 2}, "model.heads 4 in the run, 2 in the config"), ({"ffn_dim": 128}, "model.ffn_dim 64 in the run, 128 in the config")])
def test_resume_with_a_changed_model_is_refused_naming_the_key(capsys, make_config, tmp_path, override, shown):
    """A changed head count changes no weight shape: it was resumed silently; a changed size ended in
    PyTorch's ``size mismatch`` traceback."""
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    train(cfg, log=quiet)
    before = (Path(cfg.work_dir) / "last.pt").read_bytes()
    changed = make_config({"model": override, "train": {"max_steps": 4, "valid_every": 2}}, work_dir=Path(cfg.work_dir))
    code, last = _train_cli(capsys, changed, tmp_path, "--resume")
    assert code == 2 and last.startswith(f"syntaxnmt: error: {cfg.work_dir}/last.pt: --resume continues a run with the model it was trained with"), last
    assert shown in last and f"{cfg.work_dir}/config.yaml" in last
    assert (Path(cfg.work_dir) / "last.pt").read_bytes() == before
    # A regularizer may change: dropout is not the model's function.
    assert train(make_config({"model": {"dropout": 0.3}, "train": {"max_steps": 4, "valid_every": 2}}, work_dir=Path(cfg.work_dir)), resume=True, log=quiet).step == 4


def test_resume_with_weights_of_another_shape_is_refused(make_config):
    """Weights that do not fit the config's model (here: a stored config that claims another size
    than its weights have) are named, not PyTorch's ``size mismatch`` traceback."""
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    train(cfg, log=quiet)
    last = Path(cfg.work_dir) / "last.pt"
    state = load_checkpoint(last)
    name = "encoder.0.ffn.fc1.weight"
    state["model"][name] = torch.zeros([s + 1 for s in state["model"][name].shape])
    save_checkpoint(last, state)
    with pytest.raises(UserError, match=rf"last\.pt: its weights do not fit the model of this config .*\({re.escape(name)} is \[\d+, \d+\] in the checkpoint, \[\d+, \d+\] in the model\)"):
        train(make_config({"train": {"max_steps": 4, "valid_every": 2}}, work_dir=Path(cfg.work_dir)), resume=True, log=quiet)


@pytest.fixture
def auto_kernels(monkeypatch, tmp_path):
    """``train.cpu_kernels: auto`` allowed to time (without the test session's override,
    conftest), with its own cache, on a quiet machine; the process's kernels restored after."""
    from syntaxnmt.cpu import calibration as kernels
    from syntaxnmt.cpu import linear as fast_linear

    if not fast_linear.enabled():
        pytest.skip("oneDNN linear op not available")
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "kernel-cache"))
    monkeypatch.setattr(kernels, "_mode", kernels._mode)
    monkeypatch.setattr(fast_linear, "ONEDNN", fast_linear.ONEDNN)
    monkeypatch.setattr(kernels, "busy", lambda: None)  # a quiet machine: the times are final
    return kernels


def mocked_timings(monkeypatch, kernels, ms: dict[str, float]) -> list:
    """Whole-step timings that say ``ms`` (per candidate name; 100 ms for the others), and the
    list of the candidate lists timed."""
    timed = []

    def calibrate(candidates, run, budget_s=kernels.BUDGET_S, steps=kernels.STEPS):
        timed.append([c.name for c in candidates])
        return kernels.Timing({c.name: ms.get(c.name, 100.0) for c in candidates}, {c.name: 2 for c in candidates}, 0.1)

    monkeypatch.setattr(kernels, "calibrate", calibrate)
    return timed


def test_cpu_training_calibrates_on_whole_steps_and_logs_the_choice(make_config, auto_kernels):
    """``train.cpu_kernels: auto`` times real training steps of the run's model (6 candidates:
    kernels x row packing; 4 where numpy's BLAS is not OpenBLAS) once, logs the choice in one line and records it in the checkpoints
    and the machine record; a second run of the model reads the cache."""
    from syntaxnmt.cpu.machine import machine_info

    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2, "valid_bleu": False, "cpu_kernels": "auto"}})
    messages = []
    assert train(cfg, log=messages.append).step == 2
    lines = [m for m in messages if m.startswith("cpu kernels: ")]
    assert len(lines) == 1
    kinds = ["aten", "onednn", *(["openblas"] if openblas_available() else [])]
    m = re.fullmatch(rf"cpu kernels: auto -> ((?:onednn|aten|openblas), (?:row|no) packing)((?: \(within 3 % of onednn, (?:row|no) packing [\d.e+]+ ms; lower memory\))?) \(whole-step calibration: {2 * len(kinds)} candidates in [\d.]+ s, (fastest of [123](?: or more)? steps? each), 1 thread: (.*)\)", lines[0])
    assert m, lines[0]
    assert sorted(re.sub(r" [\d.e+]+ ms$", "", part) for part in m.group(4).split("; ")) == [f"{k}, {p} packing" for k in kinds for p in ("no", "row")]
    record = machine_info()["cpu_kernels"]
    assert record["choice"] == m.group(1) and record["signature"].startswith("train d32 ffn64 layers 1+1 heads 4") and "max_tokens 2048 bucket 4" in record["signature"]
    assert _params(cfg.work_dir)["cpu_kernels"] == {"mode": "auto", "row_packing": "auto", "choice": m.group(1)}
    messages = []
    train(make_config({"train": {"max_steps": 1, "valid_every": 1, "valid_bleu": False, "cpu_kernels": "auto"}}), log=messages.append)
    assert next(x for x in messages if x.startswith("cpu kernels: ")).startswith(f"cpu kernels: auto -> {m.group(1)}{m.group(2)} (whole-step times from the cache, ")  # a tie broken for memory (real times), again


def test_cpu_training_calibrates_by_default(make_config, auto_kernels, monkeypatch):
    """A config that does not set ``train.cpu_kernels`` gets ``auto``: the whole-step calibration
    times the four candidates and the fastest one trains (the default since it won end to end)."""
    timed = mocked_timings(monkeypatch, auto_kernels, {"aten, no packing": 50.0})
    cfg = make_config({"train": {"max_steps": 1, "valid_every": 1, "valid_bleu": False}})
    assert "cpu_kernels" not in cfg.train.model_fields_set
    messages = []
    train(cfg, log=messages.append)
    kinds = ["aten", "onednn", *(["openblas"] if openblas_available() else [])]
    assert [sorted(t) for t in timed] == [[f"{k}, {p} packing" for k in kinds for p in ("no", "row")]]
    assert next(m for m in messages if m.startswith("cpu kernels: ")).startswith("cpu kernels: auto -> aten, no packing (whole-step calibration: ")
    assert _params(cfg.work_dir)["cpu_kernels"] == {"mode": "auto", "row_packing": "auto", "choice": "aten, no packing"}


def test_cpu_training_takes_a_tie_of_flatter_memory_and_says_so(make_config, auto_kernels, monkeypatch):
    """Issue 48: a oneDNN step under 3 % faster than ATen's is a tie, and ATen (whose memory stays
    flat) trains; the log line says why, and the checkpoint records ATen."""
    mocked_timings(monkeypatch, auto_kernels, {"onednn, row packing": 49.0, "aten, row packing": 50.0})
    cfg = make_config({"train": {"max_steps": 1, "valid_every": 1, "valid_bleu": False}})
    messages = []
    train(cfg, log=messages.append)
    assert next(m for m in messages if m.startswith("cpu kernels: ")).startswith(
        "cpu kernels: auto -> aten, row packing (within 3 % of onednn, row packing 49 ms; lower memory) (whole-step calibration: ")
    assert _params(cfg.work_dir)["cpu_kernels"] == {"mode": "auto", "row_packing": "auto", "choice": "aten, row packing"}


def test_the_candidates_compute_the_same_loss_and_gradients(make_config, auto_kernels, monkeypatch):
    """The step the calibration times, under each candidate: the same loss and gradients (packing
    on and off alike up to float rounding, oneDNN and ATen within float tolerance)."""
    from syntaxnmt.cpu.calibration import Choice, install
    from syntaxnmt.runtime import resolve_device
    from syntaxnmt.training.distributed import World
    from syntaxnmt.training.train import SingleModel

    cfg = make_config({"model": {"dropout": 0.0, "attention_dropout": 0.0}, "train": {"cpu_kernels": "auto"}})
    task = SingleModel(cfg, World(), resolve_device("cpu"), quiet)
    signature, run = step_module.timing_step(task.raw, task.split, task.t, task.device, task.objectives)
    from syntaxnmt.cpu import linear as fast_linear
    from syntaxnmt.cpu import stack

    used = {"packed": 0, "onednn": 0}

    def counted(name, f):
        def wrapper(*args):
            out = f(*args)
            used[name] += out is not None
            return out

        return wrapper

    monkeypatch.setattr(stack, "packed_rows", counted("packed", stack.packed_rows))
    monkeypatch.setattr(fast_linear, "_dnn", counted("onednn", fast_linear._dnn))
    results = {}
    for choice in [Choice("onednn", True), Choice("onednn", False), Choice("aten", True), Choice("aten", False)]:
        install(task.raw, choice)
        assert task.raw.stacks.pack_granule == (type(task.raw.stacks).pack_granule if choice.packing else 0)
        used.update(packed=0, onednn=0)
        loss = run()["loss"]
        assert (used["packed"] > 0) == choice.packing and (used["onednn"] > 0) == (choice.kernels == "onednn"), (choice, used)  # each candidate computes its own way
        results[choice.name] = {"loss": loss, **{n: p.grad.clone() for n, p in task.raw.named_parameters() if p.grad is not None}}
    reference = results["onednn, row packing"]
    assert len(reference) == 1 + len(list(task.raw.parameters())) and any(g.abs().sum() > 0 for g in reference.values())
    assert "batch (" in signature and task.raw.training
    for name, grads in results.items():
        for n, g in grads.items():
            torch.testing.assert_close(g, reference[n], rtol=1e-4, atol=1e-5, msg=f"{name}: {n}")


def test_the_calibration_leaves_the_run_untouched(make_config, auto_kernels):
    """Timing real steps changes no parameter, no optimizer state and no random generator (bitwise)."""
    import random

    from syntaxnmt.runtime import resolve_device
    from syntaxnmt.training import loop
    from syntaxnmt.training.distributed import World
    from syntaxnmt.training.train import SingleModel

    cfg = make_config({"train": {"cpu_kernels": "auto"}})
    loop.seed_everything(cfg.seed)
    task = SingleModel(cfg, World(), resolve_device("cpu"), quiet)
    params = {k: v.clone() for k, v in task.raw.state_dict().items()}
    opt_state = str(task.opt.state_dict())
    rng = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    messages = []
    task.log = messages.append
    task.choose_cpu_kernels()
    assert f"whole-step calibration: {6 if openblas_available() else 4} candidates" in messages[0]
    assert all(torch.equal(v, params[k]) for k, v in task.raw.state_dict().items())
    assert str(task.opt.state_dict()) == opt_state and all(p.grad is None for p in task.raw.parameters())
    assert torch.equal(torch.get_rng_state(), rng[0]) and np.array_equal(np.random.get_state()[1], rng[1]) and random.getstate() == rng[2]
    assert task.raw.training


def test_explicit_settings_win_and_the_test_override_times_nothing(make_config, auto_kernels, monkeypatch):
    """``train.cpu_kernels`` and ``train.row_packing`` set explicitly win over the calibration:
    each fixed setting leaves fewer candidates (one: nothing timed); and the test session's
    SYNTAXNMT_CPU_KERNELS=onednn keeps ``auto`` from timing."""
    timed = mocked_timings(monkeypatch, auto_kernels, {"aten, row packing": 10.0, "onednn, no packing": 20.0})
    unpacked = ["onednn, no packing", "aten, no packing", *(["openblas, no packing"] if openblas_available() else [])]
    cases = [
        ({"cpu_kernels": "aten", "row_packing": "off"}, "cpu kernels: aten -> aten, no packing (as configured: ATen everywhere)", []),
        ({"cpu_kernels": "onednn"}, "cpu kernels: onednn -> onednn, row packing (as configured: oneDNN wherever it may run)", []),
        ({"cpu_kernels": "auto", "row_packing": "off"}, f"cpu kernels: auto -> onednn, no packing (whole-step calibration: {len(unpacked)} candidates in 0.1 s, fastest of 2 steps each, 1 thread: onednn, no packing 20 ms; "
         + "; ".join(f"{name} 100 ms" for name in unpacked[1:]) + ")", [unpacked]),
    ]
    for settings, line, calls in cases:
        timed.clear()
        cfg = make_config({"train": {"max_steps": 1, "valid_every": 1, "valid_bleu": False, **settings}})
        messages = []
        train(cfg, log=messages.append)
        assert [m for m in messages if m.startswith("cpu kernels")] == [line] and timed == calls
        assert _params(cfg.work_dir)["cpu_kernels"]["choice"] == line.split(" -> ")[1].split(" (")[0]
    monkeypatch.setenv(auto_kernels.ENV, "onednn")
    monkeypatch.setattr(auto_kernels, "calibrate", lambda *a, **k: pytest.fail("timed under SYNTAXNMT_CPU_KERNELS=onednn"))
    messages = []
    train(make_config({"train": {"max_steps": 1, "valid_every": 1, "valid_bleu": False, "cpu_kernels": "auto"}}), log=messages.append)
    assert "cpu kernels: onednn -> onednn, row packing (SYNTAXNMT_CPU_KERNELS=onednn: oneDNN wherever it may run)" in messages


def test_a_bad_cpu_kernels_value_names_the_key(make_config):
    with pytest.raises(UserError, match="train.cpu_kernels"):
        make_config({"train": {"cpu_kernels": "fast"}})


def test_a_resumed_run_reuses_its_recorded_cpu_kernel_choice(make_config, auto_kernels, monkeypatch, tmp_path):
    """Exact resume with ``train.cpu_kernels: auto``: the choice is recorded in the checkpoints and
    a resumed run reuses it without timing, though the cache now says another candidate is the
    fastest -- the result equals an uninterrupted run's bitwise. Changing a setting on resume is
    logged, and the new choice recorded."""
    from syntaxnmt.cpu import linear as fast_linear

    kernels = auto_kernels
    mocked_timings(monkeypatch, kernels, {"aten, no packing": 10.0})

    def cfg(max_steps, work_dir=None, mode="auto"):
        return make_config({"train": {"max_steps": max_steps, "valid_every": 2, "valid_bleu": False, "cpu_kernels": mode}}, work_dir=work_dir)

    full = cfg(4)
    train(full, log=quiet)
    half = cfg(2)
    train(half, log=quiet)
    recorded = _params(half.work_dir)["cpu_kernels"]
    assert recorded == _params(full.work_dir)["cpu_kernels"] == {"mode": "auto", "row_packing": "auto", "choice": "aten, no packing"}

    cache = tmp_path / "kernel-cache" / kernels.CACHE_FILE  # now another candidate is the fastest
    doc = json.loads(cache.read_text())
    (entry,) = doc["machines"][kernels.machine_key()].values()
    entry["ms"]["onednn, row packing"] = 1.0
    cache.write_text(json.dumps(doc))
    monkeypatch.setattr(kernels, "calibrate", lambda *a, **k: pytest.fail("a resumed run timed steps"))

    messages = []
    assert train(cfg(4, work_dir=Path(half.work_dir)), resume=True, log=messages.append).step == 4
    assert "cpu kernels: auto -> aten, no packing (recorded in the run, reused without timing: exact resume)" in messages
    assert _params(half.work_dir)["cpu_kernels"] == recorded and not fast_linear.ONEDNN
    _assert_same_state(_params(full.work_dir), _params(half.work_dir))

    messages = []  # an explicit change of mode on resume: allowed, logged, recorded
    assert train(cfg(5, work_dir=Path(half.work_dir), mode="onednn"), resume=True, log=messages.append).step == 5
    assert "cpu kernels: onednn, row packing auto now, auto, row packing auto in the run: choosing again (the numbers may differ in the last bits from an uninterrupted run's)" in messages
    assert _params(half.work_dir)["cpu_kernels"] == {"mode": "onednn", "row_packing": "auto", "choice": "onednn, row packing"}


# ---------------------------------------------------------------- one writer per work_dir, resume checks (issue 49)


def test_two_concurrent_trains_on_one_work_dir_the_second_exits_2_naming_the_holder(capsys, make_config, tmp_path):
    """Two ``syntaxnmt train`` on one work_dir both ran, and the one finishing last replaced the
    other's checkpoints. The first holds the work_dir's lock; the second exits 2 in one line naming
    the holder's PID and host, and changes nothing."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    cfg = make_config({"train": {"max_steps": 10**6, "valid_every": 10**5, "max_minutes": 1, "threads": 1}})  # the first runs a minute at most
    path = tmp_path / "first.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    lock = Path(cfg.work_dir) / ".syntaxnmt-lock"
    first = subprocess.Popen([sys.executable, "-m", "syntaxnmt", "train", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 90
        while not (lock.is_file() and f"pid {first.pid}" in lock.read_text()):
            assert first.poll() is None and time.monotonic() < deadline, "the first train never took the work_dir's lock"
            time.sleep(0.1)
        before = sorted(p.name for p in Path(cfg.work_dir).iterdir())
        code, last = _train_cli(capsys, cfg, tmp_path)
        assert code == 2 and last == f"syntaxnmt: error: {cfg.work_dir}: the work_dir is in use by syntaxnmt pid {first.pid} on host {socket.gethostname()} (its lock file {lock}): wait for it to finish, or choose another work_dir"
        code, last = _train_cli(capsys, cfg, tmp_path, "--resume")
        assert code == 2 and f"in use by syntaxnmt pid {first.pid}" in last
        assert sorted(p.name for p in Path(cfg.work_dir).iterdir()) == before
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(120)


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_message(make_config):
    """A killed run's lock file still names it; the kernel released its flock, so the next run
    takes it over and says so, and leaves the lock file empty when it ends."""
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    Path(cfg.work_dir).mkdir(parents=True)
    (Path(cfg.work_dir) / ".syntaxnmt-lock").write_text("syntaxnmt pid 999999999 on host gone\n")
    messages = []
    assert train(cfg, log=messages.append).step == 2
    assert f"{cfg.work_dir}: took over the lock of syntaxnmt pid 999999999 on host gone, which is no longer running" in messages
    assert (Path(cfg.work_dir) / ".syntaxnmt-lock").read_text() == ""


def test_a_start_removes_a_periodic_checkpoints_temporary_left_by_a_kill(make_config):
    """A kill during a periodic ``checkpoints/step-N.pt`` write left its temporary forever: the
    clean-up looked only at the top of work_dir. It enters ``checkpoints/`` now."""
    import subprocess
    import sys

    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2, "keep_checkpoints": 2}})
    train(cfg, log=quiet)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True).stdout.strip()
    left = Path(cfg.work_dir) / "checkpoints" / f".step-00000004.pt.syntaxnmt-{dead}.k2j4h5g6.tmp"
    left.write_bytes(b"half a checkpoint")
    messages = []
    train(make_config({"train": {"max_steps": 4, "valid_every": 2, "keep_checkpoints": 2}}, work_dir=Path(cfg.work_dir)), resume=True, log=messages.append)
    assert not left.exists() and f"removed {left}, left by an interrupted write" in messages
    assert sorted(p.name for p in left.parent.iterdir()) == ["step-00000002.pt", "step-00000004.pt"]


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory) -> dict:
    """A synthetic corpus of another seed: its SentencePiece vocabulary (same size) has other pieces."""
    from syntaxnmt.data.synthetic import write_corpus

    return write_corpus(tmp_path_factory.mktemp("other_corpus"), n_train=600, n_dev=30, n_test=30, seed=2)


def test_resume_after_the_training_corpus_changed_is_refused_naming_it(capsys, make_config, corpus, other_corpus, tmp_path):
    """``--resume`` after the training corpus changed (same vocab_size) retrained SentencePiece and
    continued the old weights on new piece ids (dev BLEU 8.2 -> 0.26, last.pt overwritten). The
    checkpoint's tokenizers are compared with the prepared corpus's: one line naming the vocabulary
    and the changed files; last.pt is kept."""
    import shutil

    mine = tmp_path / "corpus"
    mine.mkdir()
    for split in ("train", "dev"):
        for side in ("src", "tgt"):
            shutil.copy(corpus[split][side], mine / f"{split}.{side}")
    data = {"train_src": str(mine / "train.src"), "train_tgt": str(mine / "train.tgt"), "dev_src": str(mine / "dev.src"), "dev_tgt": str(mine / "dev.tgt"), "prepared_dir": str(tmp_path / "prepared")}
    cfg = make_config({"data": data, "train": {"max_steps": 2, "valid_every": 2}}, prepared_dir=tmp_path / "prepared")
    train(cfg, log=quiet)
    before = (Path(cfg.work_dir) / "last.pt").read_bytes()
    for side in ("src", "tgt"):  # the same paths, another corpus
        shutil.copy(other_corpus["train"][side], mine / f"train.{side}")
    again = make_config({"data": data, "train": {"max_steps": 4, "valid_every": 2}}, work_dir=Path(cfg.work_dir), prepared_dir=tmp_path / "prepared")
    code, last = _train_cli(capsys, again, tmp_path, "--resume")
    assert code == 2 and last.startswith(f"syntaxnmt: error: {cfg.work_dir}/last.pt: --resume continues a run with the vocabulary it was trained with, but the prepared corpus has another: the source vocabulary ("), last
    assert "(data.train_src, data.train_tgt changed since the run began); restore the run's corpus, or train anew in another work_dir" in last
    assert (Path(cfg.work_dir) / "last.pt").read_bytes() == before


def test_a_changed_learning_rate_is_applied_on_resume(make_config):
    """``--train.lr`` on resume was recorded in the saved config but ignored: the optimizer's saved
    state put the old peak back. It is applied from the resumed update on, and logged (so is weight_decay)."""
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    train(cfg, log=quiet)
    lower = make_config({"train": {"max_steps": 4, "valid_every": 2, "lr": 1e-3, "weight_decay": 0.01}}, work_dir=Path(cfg.work_dir))
    messages = []
    assert train(lower, resume=True, log=messages.append).step == 4
    assert "train.weight_decay 0.0 -> 0.01: applied on resume from update 2" in messages and "train.lr 0.002 -> 0.001: applied on resume from update 2" in messages
    group = _params(cfg.work_dir)["optimizer"]["param_groups"][0]
    assert group["lr"] == pytest.approx(1e-3 * inverse_sqrt(lower.train.warmup_steps)(4)) and group["weight_decay"] == 0.01
    assert _params(cfg.work_dir)["scheduler"]["base_lrs"] == [1e-3]


def test_init_from_a_checkpoint_of_another_vocabulary_is_refused_naming_it(make_config, trained_run, other_corpus, tmp_path):
    """Issue 51 item 3: ``train.init_from`` took a checkpoint of another vocabulary of the same size
    (its embedding rows belong to other pieces: dev perplexity 1,112) saying only "initialized from"."""
    data = {k: str(other_corpus[s][side]) for k, (s, side) in {"train_src": ("train", "src"), "train_tgt": ("train", "tgt"), "dev_src": ("dev", "src"), "dev_tgt": ("dev", "tgt")}.items()}
    best = Path(trained_run.work_dir) / "best.pt"
    cfg = make_config({"data": data, "train": {"max_steps": 2, "valid_every": 2, "init_from": str(best)}}, prepared_dir=tmp_path / "prepared")
    with pytest.raises(UserError, match=rf"^train.init_from {re.escape(str(best))}: its tokenizers are not this run's: the source vocabulary \(\d+ of \d+ piece ids differ\) and the target vocabulary"):
        train(cfg, log=quiet)
    assert not (Path(cfg.work_dir) / "last.pt").exists()
    same = make_config({"train": {"max_steps": 2, "valid_every": 2, "init_from": str(best)}})  # the same vocabulary: initialized
    messages = []
    train(same, log=messages.append)
    assert f"initialized from {best}" in messages


def hold_lock(folder: Path, holder: str = "syntaxnmt pid 4242 on host elsewhere"):
    """Hold ``folder``'s lock as another process would (its own open file and flock) and name ``holder`` in it."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / ".syntaxnmt-lock", "w", encoding="utf-8")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(holder + "\n")
    f.flush()
    return f


def test_train_joint_holds_the_work_dirs_lock_too(make_config):
    """``train-joint`` writes ``work_dir/forward`` and ``work_dir/reverse``: it holds ``work_dir``'s lock like ``train``."""
    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    with hold_lock(Path(cfg.work_dir)):
        with pytest.raises(UserError, match=rf"^{re.escape(cfg.work_dir)}: the work_dir is in use by syntaxnmt pid 4242 on host elsewhere "):
            train_joint(cfg, log=quiet)
        with pytest.raises(UserError, match="the work_dir is in use"):
            train(cfg, log=quiet)
    assert not (Path(cfg.work_dir) / "forward").exists()


def test_the_lock_is_reentrant_within_a_process(make_config):
    """An experiment run holds its work_dir's lock over training, translations and done.json; the
    training inside it takes the same lock again (the same process: no refusal)."""
    from syntaxnmt.textio import folder_lock

    cfg = make_config({"train": {"max_steps": 2, "valid_every": 2}})
    with folder_lock(cfg.work_dir):
        assert train(cfg, log=quiet).step == 2
        assert "syntaxnmt pid" in (Path(cfg.work_dir) / ".syntaxnmt-lock").read_text()  # still held
    assert (Path(cfg.work_dir) / ".syntaxnmt-lock").read_text() == ""


def test_a_run_refused_before_writing_leaves_no_work_dir(make_config, tmp_path):
    """The lock makes ``work_dir``; a run refused before it writes anything (a missing corpus file) removes it again."""
    cfg = make_config({"data": {"train_src": str(tmp_path / "nope.src")}}, prepared_dir=tmp_path / "prepared")
    with pytest.raises(UserError, match="nope.src"):
        train(cfg, log=quiet)
    assert not Path(cfg.work_dir).exists()
