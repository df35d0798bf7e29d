"""CPU kernel and layout choice (cpu.calibration): both kernels compute the same values, ``auto``
takes the candidate whose (mocked) whole steps are the fastest, the calibration leaves the model
and the random generators as they were, its cache is written, read and ignored when corrupt, an
override wins over it, and a recorded choice is reused. No assertion here is about speed."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from syntaxnmt.cpu import blas, machine
from syntaxnmt.cpu import calibration as kernels
from syntaxnmt.cpu import linear as lin
from syntaxnmt.cpu.calibration import Choice
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after

pytestmark = pytest.mark.skipif(not lin.enabled(), reason="oneDNN linear op not available")

ALL = [Choice("onednn", True), Choice("onednn", False), Choice("aten", True), Choice("aten", False)]


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    """Each test with its own cache folder, the default mode, oneDNN on; oneDNN allowed in training;
    without the test session's SYNTAXNMT_CPU_KERNELS=onednn (conftest) and on a quiet machine."""
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(kernels, "load_average", lambda: [0.0, 0.0, 0.0])
    monkeypatch.setattr(kernels, "_mode", "auto")
    monkeypatch.setattr(lin, "ONEDNN", True)
    monkeypatch.setattr(lin, "OPENBLAS", False)
    monkeypatch.setattr(lin, "TRAIN", True)
    monkeypatch.setattr(kernels, "openblas_available", lambda: False)  # the OpenBLAS tests turn it on
    monkeypatch.setattr(kernels, "CONTENDERS", math.inf)  # every candidate timed each round; the contenders' test sets it


class Packed(nn.Module):
    """A model whose rows can be packed (as the Transformer: a class ``pack_granule``), with
    dropout, a buffer and a linear layer."""

    pack_granule = 16

    def __init__(self):
        super().__init__()
        self.inner = lin.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("seen", torch.zeros(3))


class FakeSteps:
    """``timing`` for :func:`kernels.prepare` on a fake clock: a step of the installed choice takes
    ``ms[choice name]`` (plus ``jitter`` ms on its first, warm-up, step); counts the steps run."""

    def __init__(self, model: Packed, ms: dict[str, float], monkeypatch, signature: str = "sig", jitter: float = 0.0):
        self.model, self.ms, self.signature, self.jitter = model, ms, signature, jitter
        self.now, self.runs, self.seen = 0.0, 0, set()
        monkeypatch.setattr(kernels, "clock", lambda: self.now)

    def installed(self) -> str:
        granule = self.model.__dict__.get("pack_granule")
        return Choice(lin.kernels(), None if granule is None else granule > 0).name

    def __call__(self):
        def run():
            name = self.installed()
            self.now += (self.ms[name] + (self.jitter if name not in self.seen else 0.0)) / 1e3
            self.seen.add(name)
            self.runs += 1
            self.model.train()  # what a step does: train mode, the RNG, the gradients, the buffers
            self.model.inner(torch.randn(4, 8)).sum().backward()
            self.model.drop(torch.ones(4)).sum()
            self.model.seen.add_(1.0)
            random.random(), np.random.rand()

        return self.signature, run


TIMES = {"onednn, row packing": 50.0, "onednn, no packing": 45.0, "aten, row packing": 30.0, "aten, no packing": 40.0}


def uses_onednn(layer: nn.Module, rows: int) -> bool:
    """Whether ``layer`` computes a (rows, d_in) input with autograd through oneDNN."""
    x = torch.randn(rows, layer.in_features, requires_grad=True)
    return getattr(layer(x).grad_fn, "kernels", None) == "onednn"


def run(layer: nn.Module, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Forward with autograd, the three gradients, and forward without autograd."""
    x = x.clone().requires_grad_()
    y = layer(x)
    grads = torch.autograd.grad(y, (x, layer.weight, layer.bias), g)
    with torch.no_grad():
        y_infer = layer(x)
    return (y.detach(), *grads, y_infer)


@pytest.mark.parametrize("rows,d_in,d_out", [(1, 8, 8), (30, 32, 64), (200, 64, 32), (700, 96, 24), (2100, 16, 48)])
def test_both_kernels_compute_the_same_values_and_gradients(rows, d_in, d_out):
    torch.manual_seed(0)
    layer = lin.Linear(d_in, d_out)
    x, g = torch.randn(3, rows, d_in), torch.randn(3, rows, d_out)
    lin.set_kernels("onednn")
    assert uses_onednn(layer, rows)
    onednn = run(layer, x, g)
    lin.set_kernels("aten")
    assert not uses_onednn(layer, rows)
    aten = run(layer, x, g)
    for a, b, name in zip(onednn, aten, ("output", "grad x", "grad W", "grad b", "output without autograd")):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=name)


def test_auto_takes_the_fastest_whole_step(monkeypatch):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch, jitter=500.0)  # a slow first step does not count
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert summary["choice"] == "aten, row packing" and summary["ms"] == TIMES and summary["steps"] == dict.fromkeys(TIMES, kernels.STEPS)
    assert not lin.ONEDNN and model.pack_granule == Packed.pack_granule
    assert steps.runs == len(ALL) * (1 + kernels.STEPS)
    assert logged == [f"cpu kernels: auto -> aten, row packing (whole-step calibration: 4 candidates in {summary['seconds']:.1f} s, fastest of 3 steps each, 1 thread: aten, row packing 30 ms; aten, no packing 40 ms; onednn, no packing 45 ms; onednn, row packing 50 ms)"]
    assert summary["record"] == {"mode": "auto", "row_packing": "auto", "choice": "aten, row packing"}
    steps.ms = {**TIMES, "onednn, no packing": 10.0}  # another signature, another winner
    steps.signature = "other"
    assert kernels.prepare(model, "auto", row_packing="auto", timing=steps)["choice"] == "onednn, no packing"
    assert lin.ONEDNN and model.pack_granule == 0


def test_inference_times_the_kernels_only(monkeypatch):
    model = Packed()
    steps = FakeSteps(model, {"onednn": 3.0, "aten": 2.0}, monkeypatch)
    summary = kernels.prepare(model, "auto", timing=steps)
    assert summary["choice"] == "aten" and set(summary["ms"]) == {"onednn", "aten"} and "pack_granule" not in model.__dict__


@pytest.mark.parametrize(
    "mode,row_packing,expected",
    [("auto", "auto", ALL), ("auto", "off", [Choice("onednn", False), Choice("aten", False)]), ("auto", "on", [Choice("onednn", True), Choice("aten", True)]),
     ("onednn", "auto", [Choice("onednn", True)]), ("aten", "off", [Choice("aten", False)]), ("auto", None, [Choice("onednn"), Choice("aten")]), ("onednn", None, [Choice("onednn")])],
)
def test_explicit_settings_leave_fewer_candidates(mode, row_packing, expected):
    assert kernels.candidates_for(mode, row_packing) == expected


@pytest.mark.parametrize("mode,row_packing,choice", [("aten", "auto", "aten, row packing"), ("onednn", "off", "onednn, no packing"), ("auto", "off", "aten, no packing")])
def test_explicit_settings_win_over_the_calibration(mode, row_packing, choice, monkeypatch):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    kernels.prepare(model, "auto", row_packing="auto", timing=steps)  # the cache: aten, row packing is fastest
    steps.runs = 0
    logged = []
    summary = kernels.prepare(model, mode, row_packing=row_packing, timing=steps, log=logged.append)
    assert summary["choice"] == choice and steps.runs == 0  # from the cache, or nothing to time
    assert lin.ONEDNN == (choice.startswith("onednn")) and (model.pack_granule > 0) == choice.endswith("row packing")
    if mode != "auto":
        assert logged == [f"cpu kernels: {mode} -> {choice} (as configured: {'ATen everywhere' if mode == 'aten' else 'oneDNN wherever it may run'})"]


def test_the_calibration_leaves_the_model_and_the_generators_as_they_were(monkeypatch):
    model = Packed()
    model.eval()
    model.inner.weight.grad = torch.full_like(model.inner.weight, 0.25)
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate(), {k: v.clone() for k, v in model.state_dict().items()})
    steps = FakeSteps(model, TIMES, monkeypatch)
    kernels.prepare(model, "auto", row_packing="auto", timing=steps)
    assert steps.runs > 0
    assert torch.equal(torch.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1]) and random.getstate() == before[2]
    assert all(torch.equal(v, before[3][k]) for k, v in model.state_dict().items())  # parameters and buffers, bitwise
    assert torch.equal(model.inner.weight.grad, torch.full_like(model.inner.weight, 0.25)) and model.inner.bias.grad is None
    assert not model.training and not model.drop.training


def test_the_budget_bounds_the_timed_rounds_after_the_first(monkeypatch):
    """A warm-up round (one-off costs, not counted) and one timed round always run, whatever the
    budget: the choice is never made on warm-up times; more rounds while they fit in the budget,
    counted from the end of the first timed round."""
    model = Packed()
    steps = FakeSteps(model, {**{k: 4000.0 for k in TIMES}, "aten, no packing": 3000.0}, monkeypatch)
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=1.0)  # 15 s of warm-up already
    assert steps.runs == 4 + 4 and summary["steps"] == dict.fromkeys(TIMES, 1)
    assert summary["choice"] == "aten, no packing" and "fastest of 1 step each" in kernels.describe(summary)
    steps.signature, steps.runs = "again", 0
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=20.0)  # rounds of 15 s: warm-up, timed, then 20 s: timed (5 s left)
    assert steps.runs == 4 + 4 + 4 and summary["steps"] == dict.fromkeys(TIMES, 2)
    steps.signature, steps.runs = "once more", 0
    steps.ms = {k: 1000.0 for k in TIMES}
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=100.0)
    assert steps.runs == 4 * (1 + kernels.STEPS) and summary["steps"] == dict.fromkeys(TIMES, kernels.STEPS)


def test_a_warm_up_step_of_one_candidate_cannot_decide(monkeypatch):
    """One-off costs on a candidate's first step (its warm-up) do not count against it."""
    model = Packed()
    steps = FakeSteps(model, {**{k: 2000.0 for k in TIMES}, "aten, row packing": 1900.0}, monkeypatch, jitter=1500.0)
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=0.0)
    assert summary["choice"] == "aten, row packing" and summary["ms"]["aten, row packing"] == 1900.0


def test_a_cached_choice_made_on_warm_up_steps_is_timed_again(monkeypatch, tmp_path):
    """Caches written before every candidate had a timed step (``steps`` 0) are timed again."""
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=100.0)
    path = tmp_path / "cache" / kernels.CACHE_FILE
    doc = json.loads(path.read_text())
    entry = doc["machines"][kernels.machine_key()]["sig"]
    entry["steps"]["aten, row packing"] = 0
    path.write_text(json.dumps(doc))
    steps.runs = 0
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=100.0)
    assert summary["timed"] and steps.runs > 0
    assert json.loads(path.read_text())["machines"][kernels.machine_key()]["sig"]["steps"]["aten, row packing"] >= 1


def test_the_cache_is_written_then_read(monkeypatch, tmp_path):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    first = kernels.prepare(model, "auto", row_packing="auto", timing=steps)
    doc = json.loads((tmp_path / "cache" / kernels.CACHE_FILE).read_text())
    assert doc["version"] == kernels.CACHE_VERSION == 2
    entry = doc["machines"][kernels.machine_key()]["sig"]
    assert entry["ms"] == TIMES and entry["steps"] == dict.fromkeys(TIMES, kernels.STEPS)
    steps.runs = 0
    logged = []
    second = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert steps.runs == 0 and not second["timed"] and second["choice"] == first["choice"]
    assert logged[0].startswith(f"cpu kernels: auto -> aten, row packing (whole-step times from the cache, {tmp_path / 'cache' / kernels.CACHE_FILE}; fastest of 3 steps each")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # the thread count is part of the machine key
    kernels.prepare(model, "auto", row_packing="auto", timing=steps)
    assert steps.runs == 4 * (1 + kernels.STEPS)


@pytest.mark.parametrize("content", ["{not json", '{"version": 1, "machines": {"m": {"16x16@32": {"infer": {"onednn": 1, "aten": 2}}}}}', '{"version": 2, "machines": {"m": {"sig": {"ms": {"fast": 1}}}}}', "[]", "\udcff"])
def test_a_corrupt_or_old_cache_is_ignored_with_a_warning_and_replaced(content, monkeypatch, tmp_path, capsys):
    cache = tmp_path / "cache" / kernels.CACHE_FILE
    cache.parent.mkdir()
    cache.write_bytes(content.encode("utf-8", "surrogateescape"))
    steps = FakeSteps(Packed(), TIMES, monkeypatch)
    summary = kernels.prepare(steps.model, "auto", row_packing="auto", timing=steps)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"syntaxnmt: warning: {cache}: ") and "ignored" in err and "Traceback" not in err
    assert summary["timed"] and summary["choice"] == "aten, row packing"
    assert kernels.read_cache(cache)["machines"][kernels.machine_key()]["sig"]["ms"] == TIMES  # rewritten, valid
    assert capsys.readouterr().err == ""


def test_an_unwritable_cache_folder_is_a_warning(monkeypatch, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "file" / "cache"))
    steps = FakeSteps(Packed(), TIMES, monkeypatch)
    assert kernels.prepare(steps.model, "auto", row_packing="auto", timing=steps)["choice"] == "aten, row packing"
    err = capsys.readouterr().err
    assert err.startswith("syntaxnmt: warning: cannot write the CPU kernel cache") and err.count("\n") == 1


def test_times_taken_on_a_busy_machine_are_provisional_and_timed_again_when_quiet(monkeypatch, tmp_path):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    monkeypatch.setattr(kernels.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(kernels, "load_average", lambda: [4.5, 4.0, 3.0])  # more than 2 CPUs' worth
    logged = []
    kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert "; load average 4.5 above 2 CPUs: cached as provisional, timed again on a quieter run)" in logged[0]
    key = kernels.machine_key()
    assert kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)["provisional"][key] == ["sig"]
    steps.runs = 0  # still busy: the provisional times serve, nothing is timed
    assert kernels.prepare(model, "auto", row_packing="auto", timing=steps)["choice"] == "aten, row packing" and steps.runs == 0
    steps.ms = {**TIMES, "onednn, row packing": 5.0}  # quiet now: timed again, final, and another candidate wins
    monkeypatch.setattr(kernels, "load_average", lambda: [1.5, 4.0, 3.0])
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert steps.runs > 0 and "provisional" not in logged[0] and summary["choice"] == "onednn, row packing"
    doc = kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)
    assert key not in doc["provisional"] and doc["machines"][key]["sig"]["ms"]["onednn, row packing"] == 5.0
    steps.runs = 0
    kernels.prepare(model, "auto", row_packing="auto", timing=steps)
    assert steps.runs == 0


def test_a_damaged_provisional_list_makes_every_time_provisional(monkeypatch, tmp_path, capsys):
    steps = FakeSteps(Packed(), TIMES, monkeypatch)
    kernels.prepare(steps.model, "auto", row_packing="auto", timing=steps)
    cache = tmp_path / "cache" / kernels.CACHE_FILE
    doc = json.loads(cache.read_text())
    doc["provisional"] = "all"
    cache.write_text(json.dumps(doc))
    steps.runs = 0
    kernels.prepare(steps.model, "auto", row_packing="auto", timing=steps)  # quiet: timed again
    assert capsys.readouterr().err == f"syntaxnmt: warning: {cache}: its list of provisional times is damaged; all its times are taken as provisional\n"
    assert steps.runs > 0 and json.loads(cache.read_text())["provisional"] == {}


def test_a_candidate_the_cache_lacks_is_timed(monkeypatch, tmp_path):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    kernels.prepare(model, "auto", row_packing="on", timing=steps)  # two candidates timed
    assert set(kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)["machines"][kernels.machine_key()]["sig"]["ms"]) == {"onednn, row packing", "aten, row packing"}
    steps.runs = 0
    assert kernels.prepare(model, "auto", row_packing="auto", timing=steps)["choice"] == "aten, row packing" and steps.runs == 4 * (1 + kernels.STEPS)
    assert set(kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)["machines"][kernels.machine_key()]["sig"]["ms"]) == set(TIMES)


def test_a_recorded_choice_is_reused_without_timing_in_its_settings_only(monkeypatch, capsys):
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    recorded = kernels.prepare(model, "auto", row_packing="auto", timing=steps)["record"]
    assert recorded == {"mode": "auto", "row_packing": "auto", "choice": "aten, row packing"}
    (kernels.cache_dir() / kernels.CACHE_FILE).unlink()  # the cache is gone, and would now prefer another
    steps.ms, steps.runs = {**TIMES, "onednn, no packing": 1.0}, 0
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append, recorded=json.loads(json.dumps(recorded)))
    assert logged == ["cpu kernels: auto -> aten, row packing (recorded in the run, reused without timing: exact resume)"]
    assert steps.runs == 0 and summary["record"] == recorded and not lin.ONEDNN
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="off", timing=steps, log=logged.append, recorded=recorded)
    assert logged[0] == "cpu kernels: auto, row packing off now, auto, row packing auto in the run: choosing again (the numbers may differ in the last bits from an uninterrupted run's)"
    assert summary["choice"] == "onednn, no packing" and steps.runs > 0
    logged = []
    kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append, recorded={"mode": "auto", "choice": "fast"})
    assert logged[0].startswith("cpu kernels: the choice recorded in the run is not readable: choosing again")
    assert capsys.readouterr().err == ""


def test_an_older_single_path_plan_record_reads_back(monkeypatch):
    model = Packed()
    old = {"mode": "aten", "plan": {"choice": {}, "fallback": {}, "default": "aten"}}
    summary = kernels.prepare(model, "aten", row_packing="auto", recorded=old)
    assert summary["reason"].startswith("recorded in the run") and summary["choice"] == "aten, row packing"
    mixed = {"mode": "auto", "plan": {"choice": {"16x16@32 infer": "aten"}, "fallback": {}, "default": "onednn"}}
    logged = []
    kernels.prepare(model, "aten", row_packing="auto", recorded=mixed, log=logged.append)
    assert "not readable" in logged[0]


@pytest.mark.parametrize("value", ["aten", "onednn"])
def test_the_environment_variable_overrides_every_mode(value, monkeypatch):
    monkeypatch.setattr(kernels, "calibrate", lambda *a, **k: pytest.fail("timed under an override"))
    monkeypatch.setenv(kernels.ENV, value)
    logged = []
    model = Packed()
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=lambda: pytest.fail("asked for a step"), log=logged.append)
    assert summary["mode"] == value and logged == [f"cpu kernels: {value} -> {value}, row packing ({kernels.ENV}={value}: {'oneDNN wherever it may run' if value == 'onednn' else 'ATen everywhere'})"]
    assert uses_onednn(lin.Linear(16, 16), 256) == (value == "onednn")


def test_a_bad_environment_value_is_a_user_error(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(kernels.UserError, match=rf"^{kernels.ENV}='fast': expected one of auto, onednn, aten, openblas$"):
        kernels.configure(None)


def test_without_onednn_only_the_packing_is_timed(monkeypatch):
    monkeypatch.setattr(lin, "MODE", "0")
    monkeypatch.setattr(lin, "ENABLED", False)
    model = Packed()
    steps = FakeSteps(model, TIMES, monkeypatch)
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps)
    assert set(summary["ms"]) == {"aten, row packing", "aten, no packing"} and summary["choice"] == "aten, row packing"
    assert "unavailable or off" in kernels.prepare(model, "auto", timing=steps)["reason"]  # inference: one candidate


def test_the_machine_record_shows_the_choice(monkeypatch):
    monkeypatch.setattr(machine, "_cpu_kernels", None)
    info = machine_info()  # a benchmark takes the record first, the model chooses, with_load_after adds the choice
    assert info["cpu_kernels"] is None
    steps = FakeSteps(Packed(), TIMES, monkeypatch)
    kernels.prepare(steps.model, "auto", row_packing="auto", timing=steps)
    info = with_load_after(info)
    assert info["cpu_kernels"]["choice"] == "aten, row packing" and info["cpu_kernels"]["ms"] == TIMES
    assert "cpu kernels auto -> aten, row packing (onednn, row packing 50 ms, onednn, no packing 45 ms, aten, row packing 30 ms, aten, no packing 40 ms)" in machine_summary(info)


def test_the_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("SYNTAXNMT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernels.cache_dir() == tmp_path / "xdg" / "syntaxnmt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernels.cache_dir() == tmp_path / "home" / ".cache" / "syntaxnmt"


def test_the_real_clock_times_real_steps(monkeypatch):
    """With the real clock: every candidate is stepped and gets a positive time."""
    model = Packed()
    calls = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=lambda: ("real", lambda: calls.append(model.inner(torch.randn(64, 8)))), budget_s=1.0)
    assert set(summary["ms"]) == set(TIMES) and all(v >= 0 for v in summary["ms"].values()) and len(calls) >= 4


# ---------------------------------------------------------------- the third kernels: numpy's OpenBLAS


def test_openblas_is_a_candidate_where_numpy_has_it(monkeypatch):
    monkeypatch.setattr(kernels, "openblas_available", lambda: True)
    assert kernels.candidates_for("auto", "auto") == [*ALL, Choice("openblas", True), Choice("openblas", False)]
    assert kernels.candidates_for("auto", None) == [Choice("onednn"), Choice("aten")]  # inference: not OpenBLAS
    assert kernels.candidates_for("openblas", None) == [Choice("openblas")]
    assert kernels.candidates_for("openblas", "auto") == [Choice("openblas", True)]
    assert Choice.parse("openblas, no packing") == Choice("openblas", False) and Choice.parse("mkl, row packing") is None
    monkeypatch.setattr(kernels, "openblas_available", lambda: False)
    assert kernels.candidates_for("openblas", "off") == [Choice("aten", False)]  # ATen stands in


@pytest.mark.skipif(not blas.openblas_available(), reason="numpy's BLAS is not OpenBLAS")
def test_auto_takes_openblas_when_its_steps_are_the_fastest(monkeypatch):
    monkeypatch.setattr(kernels, "openblas_available", lambda: True)
    model = Packed()
    steps = FakeSteps(model, {**TIMES, "openblas, row packing": 20.0, "openblas, no packing": 35.0}, monkeypatch)
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert summary["choice"] == "openblas, row packing" and lin.kernels() == "openblas" and model.pack_granule == Packed.pack_granule
    assert "6 candidates" in logged[0] and logged[0].index("openblas, row packing 20 ms") < logged[0].index("aten, row packing 30 ms")
    y = model.inner(torch.randn(4, 8, requires_grad=True))
    assert y.grad_fn.kernels == "openblas"  # OpenBLAS computes it and its gradients
    again = kernels.prepare(model, "auto", row_packing="auto", timing=steps)  # from the cache, no step
    assert again["choice"] == "openblas, row packing" and not again["timed"]


def test_a_fixed_openblas_mode_without_openblas_says_why():
    logged = []
    summary = kernels.prepare(Packed(), "openblas", row_packing="on", log=logged.append)
    assert summary["choice"] == "aten, row packing" and lin.kernels() == "aten"
    assert logged == ["cpu kernels: openblas -> aten, row packing (numpy's BLAS is not OpenBLAS: ATen everywhere)"]


def test_after_the_first_round_only_the_close_candidates_are_timed_again(monkeypatch):
    """Successive halving: a candidate more than CONTENDERS slower than the fastest after the first
    timed round gets no more steps; the close ones share the budget; one left stops the timing."""
    monkeypatch.setattr(kernels, "CONTENDERS", 1.10)
    model = Packed()
    steps = FakeSteps(model, {"onednn, row packing": 50.0, "onednn, no packing": 45.0, "aten, row packing": 30.0, "aten, no packing": 32.0}, monkeypatch)
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=100.0)
    assert summary["choice"] == "aten, row packing"
    assert summary["steps"] == {"onednn, row packing": 1, "onednn, no packing": 1, "aten, row packing": kernels.STEPS, "aten, no packing": kernels.STEPS}
    assert steps.runs == 4 + 4 + 2 * (kernels.STEPS - 1)
    assert "fastest of 1 or more steps each" in kernels.describe(summary)
    steps.signature, steps.runs = "clear winner", 0
    steps.ms = {**steps.ms, "aten, no packing": 40.0}
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, budget_s=100.0)
    assert summary["choice"] == "aten, row packing" and summary["steps"] == dict.fromkeys(steps.ms, 1) and steps.runs == 4 + 4


# ---------------------------------------------------------------- ties: under 3 % faster does not earn more memory


MEASURED = {"onednn, row packing": 965.0, "onednn, no packing": 1100.0, "openblas, row packing": 986.0, "openblas, no packing": 1050.0, "aten, row packing": 1000.0, "aten, no packing": 1200.0}
"""Whole-step times as issue 48 measured them (docs/benchmarks.md): oneDNN 2.1 % faster than OpenBLAS."""


def test_in_training_a_step_under_3_percent_faster_ties_and_the_flatter_memory_wins():
    every = [Choice(k, p) for k in ("onednn", "aten", "openblas") for p in (True, False)]
    assert kernels.chosen(MEASURED, every, training=True) == Choice("openblas", True)  # 965 against 986: a tie
    assert kernels.chosen(MEASURED, every, training=False) == Choice("onednn", True)  # speed alone
    assert kernels.chosen({**MEASURED, "onednn, row packing": 0.95 * 986}, every, training=True) == Choice("onednn", True)  # 5 % faster: it wins
    assert kernels.chosen({**MEASURED, "aten, row packing": 980.0}, every, training=True) == Choice("aten", True)  # of flat ones, the faster
    assert kernels.chosen({**MEASURED, "openblas, no packing": 975.0}, every, training=True) == Choice("openblas", False)  # packing by time
    assert kernels.chosen({**MEASURED, "aten, row packing": 960.0}, every, training=True) == Choice("aten", True)  # the fastest is flat: no tie to break
    assert kernels.chosen(dict.fromkeys(MEASURED, 0.0), every, training=True) == Choice("aten", True)  # equal times: flat memory, first listed


def test_a_tie_broken_for_memory_is_said_in_the_log_and_holds_from_the_cache(monkeypatch, tmp_path):
    """oneDNN's step 2 % faster than ATen's: ATen trains, and the line says why; the cache keeps
    times, so a run reading it decides by the same rule; 5 % faster, oneDNN trains; decoding
    stays on speed alone."""
    model = Packed()
    tied = {"onednn, row packing": 49.0, "onednn, no packing": 60.0, "aten, row packing": 50.0, "aten, no packing": 55.0}
    steps = FakeSteps(model, tied, monkeypatch)
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert summary["choice"] == "aten, row packing" and not lin.ONEDNN and model.pack_granule == Packed.pack_granule
    assert logged == [f"cpu kernels: auto -> aten, row packing (within 3 % of onednn, row packing 49 ms; lower memory) (whole-step calibration: 4 candidates in {summary['seconds']:.1f} s, fastest of 3 steps each, 1 thread: "
                      "onednn, row packing 49 ms; aten, row packing 50 ms; aten, no packing 55 ms; onednn, no packing 60 ms)"]
    assert summary["record"]["choice"] == "aten, row packing" and machine_info()["cpu_kernels"]["tie"] == {"fastest": "onednn, row packing", "ms": 49.0, "margin": 0.03}
    assert machine_summary(machine_info()).endswith("cpu kernels auto -> aten, row packing (onednn, row packing 49 ms, onednn, no packing 60 ms, aten, row packing 50 ms, aten, no packing 55 ms; within 3 % of onednn, row packing: lower memory)")
    assert kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)["machines"][kernels.machine_key()]["sig"]["ms"] == tied  # times, not the choice
    steps.runs, logged = 0, []
    again = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)
    assert steps.runs == 0 and again["choice"] == "aten, row packing"
    assert logged[0].startswith(f"cpu kernels: auto -> aten, row packing (within 3 % of onednn, row packing 49 ms; lower memory) (whole-step times from the cache, {tmp_path / 'cache' / kernels.CACHE_FILE}; ")
    steps.signature, steps.ms = "five per cent", {**tied, "onednn, row packing": 47.5}
    logged = []
    assert kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append)["choice"] == "onednn, row packing" and lin.ONEDNN
    assert logged[0].startswith("cpu kernels: auto -> onednn, row packing (whole-step calibration: ") and "lower memory" not in logged[0]
    decoding = FakeSteps(Packed(), {"onednn": 49.0, "aten": 50.0}, monkeypatch, signature="decoding")
    logged = []
    assert kernels.prepare(decoding.model, "auto", timing=decoding, log=logged.append)["choice"] == "onednn"  # inference: the fastest
    assert "lower memory" not in logged[0]


@pytest.mark.parametrize("mode,row_packing,choice", [("onednn", "auto", "onednn, row packing"), ("onednn", "off", "onednn, no packing"), ("auto", "off", "aten, no packing"), ("auto", "on", "aten, row packing")])
def test_an_explicit_setting_is_not_overridden_by_the_tie_rule(mode, row_packing, choice, monkeypatch):
    """A fixed ``train.cpu_kernels`` keeps its kernels though a tie would prefer others; a fixed
    ``train.row_packing`` keeps its packing (the rule chooses among the kernels left)."""
    model = Packed()
    steps = FakeSteps(model, {"onednn, row packing": 49.0, "onednn, no packing": 49.5, "aten, row packing": 50.0, "aten, no packing": 50.5}, monkeypatch)
    kernels.prepare(model, "auto", row_packing="auto", timing=steps)  # the cache: every candidate, oneDNN fastest
    steps.runs = 0
    summary = kernels.prepare(model, mode, row_packing=row_packing, timing=steps)
    assert summary["choice"] == choice and steps.runs == 0
    assert lin.kernels() == choice.split(",")[0] and (model.pack_granule > 0) == choice.endswith("row packing")


@pytest.mark.skipif(not blas.openblas_available(), reason="numpy's BLAS is not OpenBLAS")
def test_openblas_takes_a_tie_with_a_2_percent_faster_onednn(monkeypatch):
    monkeypatch.setattr(kernels, "openblas_available", lambda: True)
    model = Packed()
    steps = FakeSteps(model, MEASURED, monkeypatch)
    logged = []
    summary = kernels.prepare(model, "auto", row_packing="auto", timing=steps, log=logged.append, budget_s=100.0)
    assert summary["choice"] == "openblas, row packing" and lin.kernels() == "openblas"
    assert logged[0].startswith("cpu kernels: auto -> openblas, row packing (within 3 % of onednn, row packing 965 ms; lower memory) (whole-step calibration: 6 candidates")
