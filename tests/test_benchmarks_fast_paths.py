"""benchmarks/fast_path_variants.py (issue 48 item 3): each variant's patch takes its fast path out
of a tiny hand-built model -- no call reaches it, the calls reached it before -- and the rest
computes what it computed; the code of every path is found. No timing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_script

import syntaxnmt.cpu as cpu
from syntaxnmt.config import DecodeConfig, ModelConfig, TrainConfig
from syntaxnmt.cpu import calibration
from syntaxnmt.cpu import linear as lin
from syntaxnmt.cpu.machine import native_kernels
from syntaxnmt.data.batches import make_batch
from syntaxnmt.decoding import translate
from syntaxnmt.decoding.translate import translate_ids
from syntaxnmt.model.transformer import Transformer
from syntaxnmt.training.step import forward_backward

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fast_path_variants.py"
V = 40
needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="syntaxnmt/cpu/_native.c not built or no AVX2/FMA on this CPU")


@pytest.fixture(scope="module")
def fpv():
    module = load_script(SCRIPT, register=True)
    yield module
    sys.modules.pop(module.__name__, None)


@pytest.fixture(autouse=True)
def kernels_restored():
    """The kernel choice is the process's: each test leaves it as it found it."""
    before = lin.kernels()
    yield
    lin.set_kernels(before)


def _model(dropout: float, seed: int = 0) -> Transformer:
    """A pre-norm model whose widths the fused kernels take (the residual-norm chain: rows of a multiple of 64)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=64, heads=4, ffn_dim=128, enc_layers=2, dec_layers=2, dropout=dropout, attention_dropout=0.0, norm="pre", max_positions=64)
    return Transformer(cfg, V, V)


def _batch(n: int = 24, seed: int = 0):
    """Sentences of 3..18 pieces: about half the positions of the padded batch are real, so row
    packing (to multiples of 128 rows with oneDNN) leaves rows out."""
    rng = np.random.default_rng(seed)
    seqs = lambda: [rng.integers(4, V, int(k)) for k in rng.integers(3, 19, n)]  # noqa: E731
    return make_batch(seqs(), seqs(), range(n))


def _train_step(fpv, name: str, dropout: float):
    """Calls into every path and the gradients of one training step of the installed model (the
    kernels chosen as the command chooses them, without timing) with variant ``name``'s patch."""
    counters = fpv.Counters()
    with fpv.removed(name), counters.installed():
        model = cpu.install(_model(dropout)).train()  # the attribute: what the patch rebinds
        calibration.prepare(model, None, row_packing="auto")
        torch.manual_seed(1)
        logs = forward_backward(model, _batch(), TrainConfig(label_smoothing=0.1).for_device("cpu"))
    return counters, logs["loss"].detach(), [p.grad.clone() for p in model.parameters()]


TRAINING = ["train_attention", "packing", "fused_dropout", "native_loss", "routing"]


@needs_kernels
@pytest.mark.parametrize("name", TRAINING)
def test_a_training_variant_takes_its_path_out_and_computes_the_same(fpv, name):
    variant = fpv.VARIANTS[name]
    if name == "routing" and not lin.enabled():
        pytest.skip("oneDNN linears unavailable: the routing has nothing to route here")
    install, usable, rows = cpu.install, cpu.attention.usable, cpu.attention.rows_usable
    all_paths, *_ = _train_step(fpv, "none", 0.1)
    without, *_ = _train_step(fpv, name, 0.1)
    assert all_paths.of(variant.counted) > 0, f"{name}: the path is not taken with all paths ({dict(all_paths.calls)})"
    assert without.of(variant.counted) == 0, f"{name}: the path is still taken ({dict(without.calls)})"
    others = [n for n in all_paths.calls if n not in variant.gone()]
    assert others and all(without.calls[n] > 0 for n in others), f"{name}: took other paths out too ({dict(all_paths.calls)} -> {dict(without.calls)})"
    assert (cpu.install, cpu.attention.usable, cpu.attention.rows_usable) == (install, usable, rows)  # undone
    if name != "fused_dropout":  # without dropout the fused kernels do not run: the values of the rest compared
        _, loss0, grads0 = _train_step(fpv, "none", 0.0)
        _, loss1, grads1 = _train_step(fpv, name, 0.0)
        torch.testing.assert_close(loss1, loss0, rtol=1e-4, atol=1e-4)
        for a, b in zip(grads0, grads1):
            torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)


def _decode(fpv, name: str):
    counters = fpv.Counters()
    sources = [np.random.default_rng(i).integers(4, V, 3 + i % 9) for i in range(12)]
    with fpv.removed(name), counters.installed():
        model = cpu.install(_model(0.1)).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(3.0 if p.dim() == 2 else 1.0)  # sharper, more varied outputs than at initialization
        calibration.prepare(model, None)
        with torch.inference_mode():
            hyps = translate_ids(model, sources, DecodeConfig(beam_size=3, batch_size=4, max_len_a=0.0, max_len_b=6, min_len=6), torch.device("cpu"), nbest=3)
    return counters, [[(h.tokens, h.score) for h in nb] for nb in hyps]


@needs_kernels
@pytest.mark.parametrize("name", ["decode_step", "train_attention", "routing"])
def test_a_decoding_variant_takes_its_path_out_and_translates_the_same(fpv, name):
    variant = fpv.VARIANTS[name]
    if name == "routing" and not lin.enabled():
        pytest.skip("oneDNN linears unavailable: the routing has nothing to route here")
    all_paths, hyps0 = _decode(fpv, "none")
    without, hyps1 = _decode(fpv, name)
    counted = ("attention_forward",) if name == "train_attention" else variant.counted  # no backward in decoding
    assert all_paths.of(counted) > 0 and without.of(variant.counted) == 0, (dict(all_paths.calls), dict(without.calls))
    assert len({t for nb in hyps0 for tokens, _ in nb for t in tokens}) > 10  # outputs worth comparing
    assert [[tokens for tokens, _ in nb] for nb in hyps1] == [[tokens for tokens, _ in nb] for nb in hyps0]
    np.testing.assert_allclose([[s for _, s in nb] for nb in hyps1], [[s for _, s in nb] for nb in hyps0], rtol=1e-4)


def test_forked_processes_turns_the_processes_on(fpv, monkeypatch):
    seen = []
    monkeypatch.setattr(translate, "batches_side_by_side", lambda work, batches, workers, device, store=None, processes=False: seen.append(processes) or iter(()))
    with fpv.removed("forked_processes"):
        translate.batches_side_by_side(None, [], 0, torch.device("cpu"), None, False)
    translate.batches_side_by_side(None, [], 0, torch.device("cpu"), None, False)
    assert seen == [True, False]


def test_every_path_names_code_that_exists(fpv):
    for variant in fpv.VARIANTS.values():
        lines = fpv.code_lines(variant.parts)
        assert len(lines["parts"]) == len(variant.parts) and lines["python"] + lines["c"] > 0, variant.name
        for part in variant.parts:
            first, last = fpv.part_lines(part)
            assert 1 <= first <= last, part
    with pytest.raises(LookupError):
        fpv.part_lines(fpv.Part("syntaxnmt/cpu/attention.py", "no_such_function"))
    with pytest.raises(LookupError):
        fpv.part_lines(fpv.Part(fpv.NATIVE_C, "/* ---- no such section", "struct"))


@pytest.fixture(scope="module")
def bench():
    return load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "fast_paths.py")


def test_each_pair_runs_with_and_without_its_path_in_abba_order_and_the_pairs_rotate(bench):
    plan = bench.schedule([("a", "train"), ("b", "decode")], 2)
    assert plan == [(1, "a", "train", "with"), (1, "a", "train", "without"), (1, "b", "decode", "with"), (1, "b", "decode", "without"),
                    (2, "b", "decode", "without"), (2, "b", "decode", "with"), (2, "a", "train", "without"), (2, "a", "train", "with")]
    assert bench.process_variant("native_loss", "with") == "none" and bench.process_variant("native_loss", "without") == "native_loss"
    assert bench.process_variant("forked_processes", "with") == "forked_processes" and bench.process_variant("forked_processes", "without") == "none"
    assert bench.process_variant("compile", "with") == "routing" and bench.process_variant("compile", "without") == "compile"  # ATen products on both sides


def test_saving_is_the_median_with_over_the_median_without_and_the_verdict_keeps_three_percent(bench):
    def runs(path, what, with_, without):
        return [{"path": path, "command": what, "round": r + 1, "role": role, "metric": m, "wall_s": 1000.0 / m, "process_variant": "none" if role == "with" else path}
                for role, ms in (("with", with_), ("without", without)) for r, m in enumerate(ms)]

    measured = runs("native_loss", "train", [104.0, 106.0], [100.0, 100.0]) + runs("routing", "train", [102.0, 102.0], [100.0, 100.0]) + runs("compile", "train", [90.0], [100.0])
    pairs = [("native_loss", "train"), ("routing", "train"), ("routing", "decode"), ("compile", "train"), ("decode_step", "decode")]
    summary = bench.summarize(measured, pairs, {"routing/decode": "no call"}, {"decode_step/decode": "failed"})
    assert summary["native_loss/train"]["saving_pct"] == pytest.approx(5.0) and summary["native_loss/train"]["round_savings_pct"] == pytest.approx([4.0, 6.0])
    assert summary["native_loss/train"]["wall_saving_pct"] == pytest.approx(100 * (10.0 / ((1000 / 104 + 1000 / 106) / 2) - 1))  # the wall clock of each process
    assert summary["routing/train"]["saving_pct"] == pytest.approx(2.0) and summary["routing/decode"]["state"] == "not used"
    assert bench.verdict("native_loss", summary).startswith("kept")
    assert bench.verdict("routing", summary).startswith("deleted")  # 2 % in training, not used in decoding
    assert bench.verdict("compile", summary).startswith("torch.compile faster")
    assert bench.verdict("decode_step", summary).startswith("error")
    rows = bench.table(["native_loss", "routing"], summary, {"native_loss": {"python": 33, "c": 91}, "routing": {"python": 189, "c": 0}})
    assert rows[2].startswith("| native_loss") and "+5.0 (rounds +4.0, +6.0)" in rows[2] and "| n/a |" in rows[2]
    assert "+2.0" in rows[3] and "not used" in rows[3]
    assert bench.spread(measured)["train"]["runs"] == 5


def test_a_fixed_kernel_choice_is_the_one_candidate_and_the_variants_change_it_on_top(fpv):
    from syntaxnmt.cpu.calibration import Choice

    with fpv.removed("none", "openblas, row packing"):
        assert calibration.candidates_for("auto", "auto") == [Choice("openblas", True)]
    with fpv.removed("routing", "openblas, row packing"):
        assert calibration.candidates_for("auto", "auto") == [Choice("aten", True)]
    with fpv.removed("packing", "openblas, row packing"):
        assert calibration.candidates_for("auto", "auto") == [Choice("openblas", False)]
    with fpv.removed("decode_step", "onednn"):
        assert calibration.candidates_for("auto", None) == [Choice("onednn")]
    assert len(calibration.candidates_for("auto", "auto")) > 1  # undone
    with pytest.raises(ValueError):
        with fpv.removed("none", "mkl"):
            pass
