"""CPU kernel choice (model.kernels): both paths compute the same values, the calibration's cache
is written, read and ignored when corrupt, an override wins over it, and ``auto`` takes the path
the (mocked) timings say is faster. No assertion here is about speed."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from syntaxnmt import runtime
from syntaxnmt.model import kernels
from syntaxnmt.model import linear as lin
from syntaxnmt.runtime import machine_info, machine_summary, with_load_after

pytestmark = pytest.mark.skipif(not lin.enabled(), reason="oneDNN linear op not available")


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    """Each test with its own cache folder, the default mode and no plan; oneDNN allowed in training;
    without the test session's SYNTAXNMT_CPU_KERNELS=onednn (conftest) and on a quiet machine."""
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.setattr(kernels, "load_average", lambda: [0.0, 0.0, 0.0])
    monkeypatch.setattr(kernels, "_mode", "auto")
    monkeypatch.setattr(lin, "PLAN", None)
    monkeypatch.setattr(lin, "TRAIN", True)


def uses_onednn(layer: nn.Module, rows: int) -> bool:
    """Whether ``layer`` computes a (rows, d_in) input with autograd through oneDNN."""
    x = torch.randn(rows, layer.in_features, requires_grad=True)
    return type(layer(x).grad_fn).__name__.startswith("_OneDNNLinear")


def run(layer: nn.Module, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Forward with autograd, the three gradients, and forward without autograd."""
    x = x.clone().requires_grad_()
    y = layer(x)
    grads = torch.autograd.grad(y, (x, layer.weight, layer.bias), g)
    with torch.no_grad():
        y_infer = layer(x)
    return (y.detach(), *grads, y_infer)


@pytest.mark.parametrize("rows,d_in,d_out", [(1, 8, 8), (30, 32, 64), (200, 64, 32), (700, 96, 24), (2100, 16, 48)])
def test_both_paths_compute_the_same_values_and_gradients(rows, d_in, d_out):
    torch.manual_seed(0)
    layer = lin.Linear(d_in, d_out)
    x, g = torch.randn(3, rows, d_in), torch.randn(3, rows, d_out)
    lin.set_plan(kernels.Plan.fixed(True))
    assert uses_onednn(layer, rows)
    onednn = run(layer, x, g)
    lin.set_plan(kernels.Plan.fixed(False))
    assert not uses_onednn(layer, rows)
    aten = run(layer, x, g)
    for a, b, name in zip(onednn, aten, ("output", "grad x", "grad W", "grad b", "output without autograd")):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=name)


def fake_measure(faster: dict[tuple[int, int], str], calls: list | None = None):
    """A ``measure`` whose times say ``faster[(d_in, d_out)]`` wins (oneDNN when absent)."""

    def measure(d_in, d_out, rows, kind, repeats=kernels.REPEATS):
        if calls is not None:
            calls.append((d_in, d_out, rows, kind))
        win = faster.get((d_in, d_out), "onednn")
        return {win: 1.0, "aten" if win == "onednn" else "onednn": 2.0}

    return measure


def model() -> nn.Module:
    return nn.Sequential(lin.Linear(16, 16), lin.Linear(16, 16), lin.Linear(16, 48), lin.Linear(48, 16))


def test_auto_takes_the_path_the_timings_say_is_faster(monkeypatch):
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 48): "aten"}))
    m = model()
    logged = []
    summary = kernels.prepare(m, "auto", ("infer", "train"), logged.append)
    assert [uses_onednn(layer, 256) for layer in m] == [True, True, False, True]
    assert not uses_onednn(m[2], 20) and not uses_onednn(m[2], 3000)  # every row count of that shape
    assert summary["measured"] == 3 * len(kernels.ROWS) * 2  # 3 distinct shapes, 3 row counts, 2 kinds
    assert "cpu kernels: train 16x48: aten at 32 rows (1 ms vs 2 ms onednn), aten at 256 rows (1 ms vs 2 ms onednn)" in "\n".join(logged)
    # a shape it did not time takes the path that won the row count over the shapes it timed
    assert uses_onednn(lin.Linear(16, 17), 256)


def test_timings_per_row_count_and_kind(monkeypatch):
    def measure(d_in, d_out, rows, kind, repeats=kernels.REPEATS):
        onednn_wins = rows >= 2048 if kind == "train" else rows <= 32
        return {"onednn": 1.0, "aten": 2.0} if onednn_wins else {"onednn": 2.0, "aten": 1.0}

    monkeypatch.setattr(kernels, "measure", measure)
    layer = lin.Linear(16, 48)
    kernels.prepare(layer, "auto", ("infer", "train"))
    assert [uses_onednn(layer, r) for r in (8, 200, 1500, 4096)] == [False, False, True, True]
    assert [lin.PLAN(r, 16, 48, False) for r in (8, 200, 4096)] == [True, False, False]


def test_the_cache_is_written_then_read(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 48): "aten"}, calls))
    first = kernels.prepare(model(), "auto", ("infer",))
    cache = tmp_path / "cache" / kernels.CACHE_FILE
    doc = json.loads(cache.read_text())
    entry = doc["machines"][kernels.machine_key()]
    assert entry["16x48@256"]["infer"] == {"aten": 1.0, "onednn": 2.0}
    assert len(entry) == 3 * len(kernels.ROWS) and first["measured"] == len(calls) == 9
    calls.clear()
    logged = []
    second = kernels.prepare(model(), "auto", ("infer",), logged.append)
    assert calls == [] and second["measured"] == 0 and "all times from the cache" in logged[0]
    assert second["table"] == first["table"]
    calls.clear()  # a new shape or kind: only what the cache lacks is measured
    kernels.prepare(nn.Sequential(lin.Linear(16, 16), lin.Linear(8, 16)), "auto", ("infer", "train"))
    assert sorted({(c[0], c[1], c[3]) for c in calls}) == [(8, 16, "infer"), (8, 16, "train"), (16, 16, "train")]


def test_another_machine_key_measures_again(monkeypatch):
    calls = []
    monkeypatch.setattr(kernels, "measure", fake_measure({}, calls))
    kernels.prepare(lin.Linear(16, 16), "auto")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # the thread count is part of the key
    kernels.prepare(lin.Linear(16, 16), "auto")
    assert len(calls) == 2 * len(kernels.ROWS)


@pytest.mark.parametrize("content", ["{not json", '{"version": 1, "machines": {"m": {"16x16": {"infer": {"onednn": 1, "aten": 2}}}}}', '{"version": 1, "machines": {"m": {"16x16@32": {"infer": {"onednn": "fast"}}}}}', "[]", "\udcff"])
def test_a_corrupt_cache_is_ignored_with_a_warning_and_replaced(content, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 16): "aten"}))
    cache = tmp_path / "cache" / kernels.CACHE_FILE
    cache.parent.mkdir()
    cache.write_bytes(content.encode("utf-8", "surrogateescape"))
    summary = kernels.prepare(lin.Linear(16, 16), "auto")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"syntaxnmt: warning: {cache}: ") and "ignored" in err and "Traceback" not in err
    assert summary["measured"] == len(kernels.ROWS) and lin.PLAN(32, 16, 16, False) is False
    assert kernels.read_cache(cache)["machines"][kernels.machine_key()]  # rewritten, valid
    assert capsys.readouterr().err == ""


def test_an_unwritable_cache_folder_is_a_warning(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kernels, "measure", fake_measure({}))
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "file" / "cache"))
    kernels.prepare(lin.Linear(16, 16), "auto")
    err = capsys.readouterr().err
    assert err.startswith("syntaxnmt: warning: cannot write the CPU kernel cache") and err.count("\n") == 1
    assert lin.PLAN(32, 16, 16, False) is True


@pytest.mark.parametrize("mode,cached_winner", [("aten", "onednn"), ("onednn", "aten")])
def test_an_override_wins_over_the_cache(mode, cached_winner, monkeypatch):
    calls = []
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 16): cached_winner}, calls))
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer", "train"))
    assert uses_onednn(lin.Linear(16, 16), 256) == (cached_winner == "onednn")
    calls.clear()
    logged = []
    summary = kernels.prepare(lin.Linear(16, 16), mode, ("infer", "train"), logged.append)
    assert calls == [] and summary["reason"].startswith("as configured") and logged == [f"cpu kernels: {mode} ({summary['reason']})"]
    assert uses_onednn(lin.Linear(16, 16), 256) == (mode == "onednn")
    assert machine_info()["cpu_kernels"]["mode"] == mode
    kernels.configure("aten")  # the process's mode (--cpu-kernels) holds for models never prepared too
    assert not uses_onednn(lin.Linear(5, 7), 3)


def test_without_onednn_everything_is_aten(monkeypatch):
    monkeypatch.setattr(lin, "MODE", "0")
    monkeypatch.setattr(lin, "ENABLED", False)
    monkeypatch.setattr(kernels, "measure", lambda *a, **k: pytest.fail("measured without oneDNN"))
    summary = kernels.prepare(lin.Linear(16, 16), "auto")
    assert "unavailable or off" in summary["reason"]


def test_the_budget_skips_what_does_not_fit():
    calls = []
    times, done = kernels.calibrate([(16, 16), (64, 64)], ["infer"], budget_s=0.0, measure_fn=fake_measure({}, calls))
    assert done == 0 and times == {} and calls == []
    times, done = kernels.calibrate([(64, 64), (16, 16)], ["infer", "train"], measure_fn=fake_measure({}, calls))
    assert done == len(calls) == 12 and calls[:6] == [(64, 64, r, k) for r in kernels.ROWS for k in ("infer", "train")]  # the first shape first


def test_the_real_measurement_returns_both_paths():
    t = kernels.measure(8, 16, 32, "train", repeats=1)
    assert set(t) == {"onednn", "aten"} and all(v > 0 for v in t.values())


def test_the_machine_record_shows_the_choice(monkeypatch):
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 48): "aten"}))
    monkeypatch.setattr(runtime, "_cpu_kernels", None)
    info = machine_info()  # a benchmark takes the record first, the model chooses, with_load_after adds the choice
    assert info["cpu_kernels"] is None
    kernels.prepare(nn.Sequential(lin.Linear(16, 16), lin.Linear(16, 48)), "auto")
    info = with_load_after(info)
    assert info["cpu_kernels"]["table"][0] == {"kind": "infer", "shape": "16x16", "rows": 32, "onednn_ms": 1.0, "aten_ms": 2.0, "choice": "onednn"}
    assert "cpu kernels auto: oneDNN for 3 of 6 timed products" in machine_summary(info)


def test_the_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("SYNTAXNMT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernels.cache_dir() == tmp_path / "xdg" / "syntaxnmt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernels.cache_dir() == tmp_path / "home" / ".cache" / "syntaxnmt"


def test_times_taken_on_a_busy_machine_are_provisional_and_timed_again_when_quiet(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 16): "aten"}, calls))
    monkeypatch.setattr(kernels.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(kernels, "load_average", lambda: [4.5, 4.0, 3.0])  # more than 2 CPUs' worth
    logged = []
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",), logged.append)
    assert len(calls) == len(kernels.ROWS) and "load average 4.5 above 2 CPUs: cached as provisional, timed again on a quieter run" in logged[0]
    doc = kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)
    key = kernels.machine_key()
    assert doc["provisional"][key] == sorted(f"16x16@{r} infer" for r in kernels.ROWS) and len(doc["machines"][key]) == len(kernels.ROWS)
    calls.clear()  # still busy: the provisional times serve, nothing is timed
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",))
    assert calls == [] and lin.PLAN(32, 16, 16, False) is False
    monkeypatch.setattr(kernels, "measure", fake_measure({}, calls))  # quiet now: timed again, final, and this time oneDNN wins
    monkeypatch.setattr(kernels, "load_average", lambda: [1.5, 4.0, 3.0])
    logged = []
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",), logged.append)
    assert len(calls) == len(kernels.ROWS) and "provisional" not in logged[0] and lin.PLAN(32, 16, 16, False) is True
    doc = kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)
    assert key not in doc["provisional"] and doc["machines"][key]["16x16@32"]["infer"] == {"onednn": 1.0, "aten": 2.0}
    calls.clear()
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",))
    assert calls == []


def test_a_provisional_time_not_timed_again_still_serves(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 16): "aten"}))
    monkeypatch.setattr(kernels, "load_average", lambda: [99.0, 0.0, 0.0])
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",))
    monkeypatch.setattr(kernels, "load_average", lambda: [0.0, 0.0, 0.0])
    summary = kernels.prepare(lin.Linear(16, 16), "auto", ("infer",), budget_s=0.0)  # quiet, but no time to time again
    assert summary["measured"] == 0 and summary["untimed"] == [] and lin.PLAN(32, 16, 16, False) is False
    assert len(kernels.read_cache(tmp_path / "cache" / kernels.CACHE_FILE)["provisional"][kernels.machine_key()]) == len(kernels.ROWS)


def test_a_plan_record_is_plain_strings_and_reads_back():
    plan = kernels.Plan(choice={(16, 48, 256, True): False, (16, 16, 32, False): True}, fallback={(256, True): True}, default=True)
    record = plan.to_record()
    assert record == {"choice": {"16x16@32 infer": "onednn", "16x48@256 train": "aten"}, "fallback": {"256 train": "onednn"}, "default": "onednn"}
    assert kernels.Plan.from_record(json.loads(json.dumps(record))) == plan
    for bad in (None, [], {"choice": {}, "fallback": {}}, {**record, "default": "fast"}, {**record, "choice": {"16x48 train": "aten"}}, {**record, "fallback": {"x train": "aten"}}):
        assert kernels.Plan.from_record(bad) is None


def test_a_recorded_plan_is_reused_without_timing_in_its_mode_only(monkeypatch, capsys):
    monkeypatch.setattr(kernels, "measure", fake_measure({(16, 16): "aten"}))
    recorded = kernels.prepare(lin.Linear(16, 16), "auto", ("infer", "train"))["record"]
    assert recorded["mode"] == "auto" and recorded["plan"]["choice"]["16x16@256 train"] == "aten"
    monkeypatch.setattr(kernels, "measure", lambda *a, **k: pytest.fail("timed a recorded plan"))
    (kernels.cache_dir() / kernels.CACHE_FILE).unlink()  # the cache is gone: the record suffices
    logged = []
    summary = kernels.prepare(lin.Linear(16, 16), "auto", ("infer", "train"), logged.append, recorded=recorded)
    assert logged == ["cpu kernels: auto (the plan recorded in the run, reused without timing (exact resume))"]
    assert summary["record"] == recorded and not uses_onednn(lin.Linear(16, 16), 256)
    logged = []
    summary = kernels.prepare(lin.Linear(16, 16), "onednn", ("infer", "train"), logged.append, recorded=recorded)
    assert logged[0].startswith("cpu kernels: onednn now, auto in the run: choosing again") and uses_onednn(lin.Linear(16, 16), 256)
    logged = []
    monkeypatch.setattr(kernels, "measure", fake_measure({}))
    kernels.prepare(lin.Linear(16, 16), "auto", ("infer",), logged.append, recorded={"mode": "auto", "plan": "damaged"})
    assert logged[0].startswith("cpu kernels: the plan recorded in the run is not readable: choosing again")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["aten", "onednn"])
def test_the_environment_variable_overrides_every_mode(value, monkeypatch):
    monkeypatch.setattr(kernels, "measure", lambda *a, **k: pytest.fail("timed under an override"))
    monkeypatch.setenv(kernels.ENV, value)
    logged = []
    summary = kernels.prepare(lin.Linear(16, 16), "auto", ("infer", "train"), logged.append)
    assert summary["mode"] == value and logged == [f"cpu kernels: {value} ({kernels.ENV}={value}: {'oneDNN wherever it may run' if value == 'onednn' else 'ATen everywhere'})"]
    assert uses_onednn(lin.Linear(16, 16), 256) == (value == "onednn")


def test_a_bad_environment_value_is_a_user_error(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(kernels.UserError, match=rf"^{kernels.ENV}='fast': expected one of auto, onednn, aten$"):
        kernels.configure(None)


def test_a_damaged_provisional_list_makes_every_time_provisional(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(kernels, "measure", fake_measure({}, calls))
    kernels.prepare(lin.Linear(16, 16), "auto")
    cache = tmp_path / "cache" / kernels.CACHE_FILE
    doc = json.loads(cache.read_text())
    doc["provisional"] = "all"
    cache.write_text(json.dumps(doc))
    calls.clear()
    kernels.prepare(lin.Linear(16, 16), "auto")  # quiet: each time is taken again
    err = capsys.readouterr().err
    assert err == f"syntaxnmt: warning: {cache}: its list of provisional times is damaged; all its times are taken as provisional\n"
    assert len(calls) == len(kernels.ROWS) and json.loads(cache.read_text())["provisional"] == {}
