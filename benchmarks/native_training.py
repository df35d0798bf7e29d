"""The native kernels of CPU training against PyTorch's operators, on the same batches, in one run.

    python benchmarks/native_training.py [--config benchmarks/out/side_by_side/syntaxnmt.yaml]
        [--batches 24] [--warmup 4] [--threads 2] [--kernels A,B] [--json benchmarks/out/native_training.json] [--isa native|avx2]

``train.cpu_native: auto`` computes three pieces of a CPU training update in the C kernels of
``syntaxnmt/cpu/_native.c`` (docs/benchmarks.md, "Native kernels of training"): the attention of
short sequences (:mod:`syntaxnmt.cpu.attention`), dropout
(:mod:`syntaxnmt.cpu.dropout`) and the label-smoothed loss with its gradient
(:func:`syntaxnmt.cpu.loss.native_smoothed_xent`); ``torch`` keeps PyTorch's operators.
On a machine whose speed drifts by 10-15 % within minutes (a KVM guest), blocks of updates timed
one after another compare the drift, not the code. This script therefore trains the side-by-side
model (the config ``benchmarks/side_by_side.py`` writes) as ``benchmarks/speed.py`` does and
times **every batch twice in a row**, once per setting (the order alternating from batch to
batch), so that each pair sees the same batch on the same machine state. It prints the speed-up
of the native kernels over the total time and the median of the per-batch ratios, and, for the
shapes of the last batch, each kernel alone against its PyTorch counterpart (forward and
backward). The figures and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before
and after) also go to ``--json``.

``--kernels openblas,aten`` pairs two kernel choices of the linear layers the same way instead
(``syntaxnmt.cpu.linear.set_kernels``; docs/benchmarks.md, "OpenBLAS products"), the native
kernels on, row packing as the calibration chose it. ``--switch NAME`` pairs one setting of the
native training path on and off, the rest as the command runs it, row packing on unless NAME is
row-packing:

- ``row-granule``: packed rows (and the loss's last chunk) topped up to 8 rows where ATen or
  OpenBLAS compute the products, instead of the 128 that oneDNN's per-shape state needs
  (``linear.row_granule``);
- ``row-packing``: the products on the real rows (``PackedStacks.pack_granule`` of the model's ``stacks``).

The fused dropout and norm kernels, the packed layers and the row maps have no switch: a paired
measurement of one of them runs ``benchmarks/side_by_side.py`` at this revision and at one
without it (issue 48).

``--isa avx2`` restarts the script with ATen, oneDNN, MKL and OpenBLAS restricted to AVX2
(``benchmarks/_isa.py``: an emulation of an AVX2 machine on this CPU, which the machine record says).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _isa  # noqa: E402  (before torch: --isa avx2 restarts this script with the AVX2 limits)

if __name__ == "__main__":
    _isa.reexec_for_isa()

# isort: split
import syntaxnmt.__main__  # noqa: F401  (first: the command's OpenMP defaults, set before torch loads)

# isort: split
import torch
import torch.nn.functional as F
from speed import training_task  # noqa: E402

from syntaxnmt.config import load_config
from syntaxnmt.cpu import attention as native_attention
from syntaxnmt.cpu import linear as lin
from syntaxnmt.cpu.blas import openblas_available
from syntaxnmt.cpu.dropout import dropout
from syntaxnmt.cpu.machine import machine_info, machine_summary, native_training_kernels, set_native_training, with_load_after
from syntaxnmt.runtime import keep_freed_memory
from syntaxnmt.textio import atomic_write_text


def best_ms(fn, repeats: int = 5) -> float:
    """The fastest of ``repeats`` calls of ``fn``, in ms (after one untimed call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def both(fn) -> dict[str, float]:
    """``fn`` timed with the native kernels and with PyTorch's operators."""
    out = {}
    for name, on in (("native", True), ("torch", False)):
        set_native_training(on)
        out[name] = best_ms(fn)
    set_native_training(True)
    return out


def kernels_alone(batch_shape: tuple[int, int], d_model: int, heads: int, ffn: int, vocab: int) -> dict[str, dict[str, float]]:
    """Each kernel against PyTorch's operators at one batch's shapes (forward and backward)."""
    b, t = batch_shape
    d = d_model // heads
    gen = torch.Generator().manual_seed(0)
    figures: dict[str, dict[str, float]] = {}

    def attention(causal: bool):
        x = [torch.randn(b, t, d_model, generator=gen).requires_grad_() for _ in range(3)]
        pad = torch.zeros(b, t, dtype=torch.bool)
        pad[: b // 2, t - 2 :] = True
        grad = torch.randn(b, t, d_model, generator=gen)

        def run():
            q, k, v = (y.view(b, t, heads, d).transpose(1, 2) for y in x)
            if native_training_kernels() is not None:
                out = native_attention.attention(q, k, v, None if causal else pad, causal)
            elif causal:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])
            torch.autograd.grad(out.transpose(1, 2).reshape(b, t, d_model), x, grad)

        return run

    figures[f"self-attention, causal ({b} x {heads} heads x {t} x {d})"] = both(attention(True))
    figures[f"attention, padded keys ({b} x {heads} heads x {t} x {d})"] = both(attention(False))
    xs = [torch.randn(b * t, width, generator=gen).requires_grad_() for width in [d_model] * 17 + [ffn] * 6]

    def dropouts():
        for x in xs:
            y = dropout(x, 0.1, True)
            torch.autograd.grad(y, x, y)

    figures[f"dropout of an update (17 x {b * t} x {d_model}, 6 x {b * t} x {ffn})"] = both(dropouts)
    from syntaxnmt.model.outputs import ModelOutput
    from syntaxnmt.training.losses import sequence_loss

    states = torch.randn(b * t, d_model, generator=gen).requires_grad_()
    layer = torch.nn.Linear(d_model, vocab, bias=False)
    target = torch.randint(4, vocab, (b * t,), generator=gen)

    def loss():
        value, _ = sequence_loss(ModelOutput(states, layer, encoder=None), target, 0.1)
        torch.autograd.grad(value, [states, layer.weight])

    figures[f"output layer and loss ({b * t} x {d_model} -> {vocab})"] = both(loss)
    return figures


def patched(module, name: str, on: bool, off_value) -> None:
    """``module.name`` as the library has it (on) or ``off_value`` (off), the original kept on first use."""
    originals = patched.__dict__.setdefault("originals", {})
    original = originals.setdefault((module.__name__, name), getattr(module, name))
    setattr(module, name, original if on else off_value)


def row_granule(on: bool) -> None:
    """On: packed rows topped up to 8 where ATen or OpenBLAS compute (``linear.row_granule``); off: always to the class's granule (128)."""
    from syntaxnmt.cpu import stack as transformer  # the stack runner's rows
    from syntaxnmt.training import losses

    for module in (transformer, losses):
        patched(module, "row_granule", on, lambda granule: granule)


def switch(task, name: str) -> dict[str, Callable[[], None]]:
    """The two settings of ``--switch name`` (on first) for the model of ``task``."""
    model = task.raw.stacks  # syntaxnmt.cpu.stack.PackedStacks (syntaxnmt.cpu.install)
    flip = {
        "row-granule": row_granule,
        "row-packing": lambda on: setattr(model, "pack_granule", type(model).pack_granule if on else 0),
    }[name]
    if name != "row-packing":
        model.pack_granule = type(model).pack_granule
    return {f"{name} on": lambda: flip(True), f"{name} off": lambda: flip(False)}


SWITCHES = ("row-granule", "row-packing")


def paired_updates(task, stream, settings: dict[str, Callable[[], None]], batches: int, warmup: int) -> dict:
    """Train ``warmup`` batches, then each of ``batches`` batches once per setting (``settings``:
    two names and what installs each; the order alternating from batch to batch). Returns the
    tokens, the seconds per setting and the per-batch ratios (second setting's time over the first's)."""
    (a, install_a), (b, install_b) = settings.items()
    step = 0
    for i in range(warmup):
        (install_a if i % 2 == 0 else install_b)()
        task.update([next(stream)[2]], step)
        step += 1
    seconds, ratios, tokens = {a: 0.0, b: 0.0}, [], 0
    for i in range(batches):
        batch = next(stream)[2]
        took = {}
        for name in (a, b) if i % 2 == 0 else (b, a):
            settings[name]()
            start = time.perf_counter()
            n = task.update([batch], step)["tokens"]
            took[name] = time.perf_counter() - start
            step += 1
        tokens += n
        for name in (a, b):
            seconds[name] += took[name]
        ratios.append(took[b] / took[a])
    return {"tokens": tokens, "seconds": seconds, "ratios": ratios, "last_batch": batch}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="benchmarks/out/side_by_side/syntaxnmt.yaml")
    ap.add_argument("--batches", type=int, default=24, help="batches, each timed once per setting")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", metavar="A,B", help="compare two kernel choices of the linear layers (e.g. openblas,aten; "
                    "syntaxnmt.cpu.linear.set_kernels) instead of the native kernels on and off; row packing as the calibration chose it")
    ap.add_argument("--switch", choices=SWITCHES, help="pair one part of the native training path on and off instead (see above)")
    ap.add_argument("--json", default="benchmarks/out/native_training.json", help="figures and the machine record")
    _isa.add_isa_argument(ap)
    args = ap.parse_args()
    if args.kernels and args.switch:
        sys.exit("native_training: --kernels or --switch, not both")
    if args.switch:
        if native_training_kernels() is None:
            sys.exit("native_training: syntaxnmt/cpu/_native.c was not built or this CPU lacks AVX2/FMA: nothing to switch")
        settings = None
    elif args.kernels:
        names = args.kernels.split(",")
        if len(names) != 2 or any(k not in lin.KERNELS for k in names):
            sys.exit(f"native_training: --kernels takes two of {', '.join(lin.KERNELS)}, as A,B")
        if "openblas" in names and not openblas_available():
            sys.exit("native_training: numpy's BLAS is not OpenBLAS: nothing to compare")
        settings = {k: (lambda k=k: lin.set_kernels(k)) for k in names}
    else:
        if native_training_kernels() is None:
            sys.exit("native_training: syntaxnmt/cpu/_native.c was not built (pip install -e . with a C compiler) or this CPU lacks AVX2/FMA: nothing to compare")
        settings = {"train.cpu_native auto": lambda: set_native_training(True), "train.cpu_native torch": lambda: set_native_training(False)}
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    machine = machine_info()
    cfg = load_config(args.config)
    task, stream = training_task(cfg, torch.device("cpu"))
    chosen, granule = lin.kernels(), task.raw.stacks.pack_granule
    if args.switch:
        settings = switch(task, args.switch)
    try:
        run = paired_updates(task, stream, settings, args.batches, args.warmup)
    finally:
        set_native_training(True)
        lin.set_kernels(chosen)
        if args.switch:
            settings[f"{args.switch} on"]()
            task.raw.stacks.pack_granule = granule
    (a, b), tokens, seconds, ratios = settings, run["tokens"], run["seconds"], run["ratios"]
    figures = {
        "batches": args.batches, "threads": torch.get_num_threads(), "tokens_per_update": tokens / args.batches, "compared": [a, b],
        "tok_s": {name: tokens / seconds[name] for name in (a, b)},
        "speedup_total": seconds[b] / seconds[a], "speedup_median_paired": statistics.median(ratios), "paired": ratios,
    }
    print(f"{args.batches} batches of the side-by-side model, each trained once per setting, {torch.get_num_threads()} threads, {tokens / args.batches:.0f} target tokens per update")
    for name in (a, b):
        print(f"{name}: {figures['tok_s'][name]:7.0f} target tok/s")
    print(f"speed-up of {a} over {b}: {figures['speedup_total']:.3f}x over the total time, {figures['speedup_median_paired']:.3f}x median of the per-batch ratios "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    if not args.kernels and not args.switch:
        batch = run["last_batch"]
        longest = int(max(task.split["src"].lengths[batch].max(), task.split["tgt"].lengths[batch].max())) + 1  # + EOS
        mc = cfg.model
        alone = kernels_alone((len(batch), longest), mc.d_model, mc.heads, mc.ffn_dim, task.raw.output.weight.size(0))
        figures["kernels_ms"] = alone
        print("each kernel alone, forward and backward, fastest of 5 (ms): native / torch")
        for name, ms in alone.items():
            print(f"  {name}: {ms['native']:.1f} / {ms['torch']:.1f} ({ms['torch'] / ms['native']:.2f}x)")
    with_load_after(machine)
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "config": args.config, **figures, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
