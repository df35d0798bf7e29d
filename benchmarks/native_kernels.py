"""The C kernels of CPU training, each alone, at the shapes of the side-by-side model, on this machine.

    python benchmarks/native_kernels.py [--sentences 204] [--length 20] [--heads 4] [--d-head 64]
        [--rows 4096] [--ffn-dim 1024] [--repeats 30] [--threads 2] [--against REF]
        [--json benchmarks/out/native_kernels.json] [--isa native|avx2]

Times, in one process (each figure the median of ``--repeats`` calls after warm-up):

- the attention of training (:func:`syntaxnmt.cpu.attention.attention`) forward and
  forward + backward, non-causal with padded keys (the encoder's and the cross-attention's) and
  causal (the decoder's), ``--sentences`` x ``--length`` positions, ``--heads`` heads of
  ``--d-head``; GFLOP/s counts the four products of the forward (Q K^T, P V) and twice as many back;
- dropout (:mod:`syntaxnmt.cpu.dropout`: alone, with the residual, with bias and ReLU) forward
  and backward on ``--rows`` x ``--ffn-dim`` floats, p = 0.1, beside two operators that only move
  memory (``x * 1.1``, ``r + x``): how far a kernel is from the memory's speed.

``--against REF`` also builds ``syntaxnmt/cpu/_native.c`` of the git revision REF (``git show``; ``cc -O3
-fopenmp`` as the package builds it) into a temporary folder and times its attention kernels
through the same calls, paired call by call with this tree's (their interface has not changed
since the row maps of 2026-11-30 but for the ``threads`` argument of stop 46, which an older build
gets as Python threads, :class:`OlderBuild`; dropout's contract has, so only the attention is compared).
The figures of an older tree come from running this script there (it uses only functions that
tree has). Prints a table and the machine record (load average before and after), both also to
``--json``. ``--isa avx2``: the libraries restricted to AVX2 (``benchmarks/_isa.py``; the C
kernels always run their AVX2 code).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import sysconfig
import tempfile
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

from syntaxnmt.cpu import attention as native_attention
from syntaxnmt.cpu import dropout as drop
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.cpu.threads import in_threads
from syntaxnmt.textio import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent


def median_ms(f: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``repeats`` calls of ``f`` after three untimed ones."""
    for _ in range(3):
        f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def build_revision(ref: str, folder: Path):
    """The ``_native`` module of ``syntaxnmt/cpu/_native.c`` (``syntaxnmt/cpu/_native.c`` before issue 48) at git revision ``ref``, compiled into ``folder``."""
    for path in ("syntaxnmt/cpu/_native.c", "syntaxnmt/_native.c"):
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, text=True)
        if not source.returncode:
            break
    if source.returncode:
        sys.exit(f"native_kernels: --against {ref}: {source.stderr.strip()}")
    (folder / "_native.c").write_text(source.stdout)
    target = folder / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["cc", "-O3", "-fopenmp", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(folder / "_native.c"), "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("_native", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return OlderBuild(module)


class OlderBuild:
    """A build's attention kernels behind this tree's calls. Before their own worker threads
    (2026-11-30, stop 46) the kernels took no ``threads`` argument and the Python side split the
    sentences between threads (``runtime.in_threads``): such a build is called that way."""

    def __init__(self, module):
        self.module = module

    def _call(self, name: str, args: tuple, at: int) -> None:
        kernel = getattr(self.module, name)
        try:
            kernel(*args)
        except TypeError:  # no threads argument: the sentences b0..b1 (args[at], args[at + 1]) in Python threads
            *rest, threads = args
            b0 = rest[at]
            in_threads(lambda a, z: kernel(*rest[:at], b0 + a, b0 + z, *rest[at + 2 :]), rest[at + 1] - b0)

    def attention_forward(self, *args) -> None:
        self._call("attention_forward", args, 6)  # q, k, v, out, P, pad, then b0, b1

    def attention_backward(self, *args) -> None:
        self._call("attention_backward", args, 8)  # q, k, v, dout, dq, dk, dv, P, then b0, b1


def attention_cases(b: int, t: int, heads: int, d: int) -> dict[str, tuple]:
    """q, k, v laid out as the projections hold them, the output's gradient, the key padding, causal."""
    def heads_of() -> torch.Tensor:
        return torch.randn(b, t, heads, d).transpose(1, 2).requires_grad_()

    pad = torch.zeros(b, t, dtype=torch.bool)
    for i in range(b):
        pad[i, t - i % 5 :] = True  # 0-4 padded keys, as in a bucketed batch
    grad = torch.randn(b, t, heads, d).transpose(1, 2)
    return {"non-causal, padded keys": (heads_of(), heads_of(), heads_of(), grad, pad, False), "causal": (heads_of(), heads_of(), heads_of(), grad, None, True)}


def time_attention(case: tuple, repeats: int) -> tuple[float, float]:
    """Forward and forward + backward milliseconds of one case."""
    q, k, v, grad, pad, causal = case
    forward = median_ms(lambda: native_attention.attention(q, k, v, pad, causal), repeats)
    both = median_ms(lambda: torch.autograd.grad(native_attention.attention(q, k, v, pad, causal), (q, k, v), grad), repeats)
    return forward, both


def dropout_rows(rows: int, cols: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Forward and backward milliseconds of dropout's three forms and the two memory references."""
    x, r = torch.randn(rows, cols, requires_grad=True), torch.randn(rows, cols, requires_grad=True)
    bias, grad = torch.randn(cols, requires_grad=True), torch.randn(rows, cols)
    forms = {
        "dropout": (lambda: drop.dropout(x, 0.1, True), (x,)),
        "dropout + residual": (lambda: drop.dropout_add(r, x, 0.1, True), (r, x)),
        "bias + ReLU + dropout": (lambda: drop.bias_relu_dropout(x, bias, 0.1, True), (x, bias)),
    }
    out = {}
    for name, (f, inputs) in forms.items():
        y = f()
        out[name] = (median_ms(f, repeats), median_ms(lambda: torch.autograd.grad(y, inputs, grad, retain_graph=True), repeats))
    with torch.no_grad():
        out["x * 1.1 (memory only)"] = (median_ms(lambda: x * 1.1, repeats), float("nan"))
        out["r + x (memory only)"] = (median_ms(lambda: r + x, repeats), float("nan"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=204)
    ap.add_argument("--length", type=int, default=20)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-head", type=int, default=64)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--ffn-dim", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--against", metavar="REF", help="also time the attention kernels of syntaxnmt/cpu/_native.c at this git revision")
    ap.add_argument("--json", default="benchmarks/out/native_kernels.json")
    _isa.add_isa_argument(ap)
    args = ap.parse_args()
    if native_attention.native_training_kernels() is None:
        sys.exit("native_kernels: the C kernels are not built for this CPU (pip install -e . with a C compiler, an AVX2/FMA CPU)")
    torch.set_num_threads(args.threads)
    machine = machine_info()
    torch.manual_seed(0)
    cases = attention_cases(args.sentences, args.length, args.heads, args.d_head)
    flops = {name: 4.0 * args.sentences * args.heads * args.length * args.length * args.d_head * (0.5 if case[5] else 1.0) for name, case in cases.items()}
    builds = {"this tree": native_attention._native}
    with tempfile.TemporaryDirectory() as folder:
        if args.against:
            builds[args.against] = build_revision(args.against, Path(folder))
        attention: dict[str, dict[str, list[float]]] = {}
        for name, case in cases.items():
            attention[name] = {}
            for _ in range(2):  # the builds alternate, twice each, and the faster pass counts
                for build, module in builds.items():
                    native_attention._native = module
                    try:
                        times = time_attention(case, args.repeats)
                    finally:
                        native_attention._native = builds["this tree"]
                    best = attention[name].get(build)
                    attention[name][build] = list(times) if best is None else [min(a, b) for a, b in zip(best, times)]
    dropout = dropout_rows(args.rows, args.ffn_dim, args.repeats)
    with_load_after(machine)
    print(f"attention of training: {args.sentences} sentences x {args.length} positions, {args.heads} heads of {args.d_head}, {args.threads} threads (median of {args.repeats} calls)")
    print("| case | build | forward ms | GFLOP/s | backward ms | GFLOP/s |")
    print("|---|---|---|---|---|---|")
    for name, per_build in attention.items():
        for build, (fwd, both) in per_build.items():
            back = both - fwd
            print(f"| {name} | {build} | {fwd:.2f} | {flops[name] / fwd / 1e6:.1f} | {back:.2f} | {2 * flops[name] / back / 1e6:.1f} |")
    print(f"dropout, p = 0.1, {args.rows} x {args.ffn_dim} floats, {args.threads} threads (median of {args.repeats} calls)")
    print("| form | forward ms | backward ms |")
    print("|---|---|---|")
    for name, (fwd, back) in dropout.items():
        print(f"| {name} | {fwd:.2f} | {'-' if back != back else f'{back:.2f}'} |")
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "setting": vars(args),
           "attention_ms": attention, "attention_forward_gflop": flops, "dropout_ms": {k: list(v) for k, v in dropout.items()}, "machine": machine}
    atomic_write_text(Path(args.json), json.dumps(doc, indent=1, default=str))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
