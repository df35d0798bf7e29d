"""Where a CPU training update's time goes: the products against everything else, on this machine.

    python benchmarks/update_profile.py [--config benchmarks/out/side_by_side/syntaxnmt.yaml]
        [--updates 6] [--warmup 4] [--threads 2] [--top 15] [--reference 4096] [--row-packing on|off] [--isa native|avx2]
        [--json benchmarks/out/update_profile.json]

Trains the model of ``--config`` (default: the side-by-side model that ``benchmarks/side_by_side.py``
writes) as ``syntaxnmt train`` does, with ATen's products (``train.cpu_kernels: aten``: the
profiler counts the floating-point operations of ``aten::mm`` and ``aten::addmm``, not of oneDNN's
or OpenBLAS's products) and row packing as ``--row-packing`` says, and runs ``torch.profiler`` over ``--updates`` updates after ``--warmup`` untimed
ones. It prints the operators with the most self CPU time and, for the matrix products: GFLOP per
update, milliseconds per update, GFLOP/s, their share of the self CPU time, and the same
library's speed on one large product (``--reference`` cubed, 4096 x 4096 x 4096; fastest of 3) as the reference of what
the cores do. From these the bound of the issue-26 question "how much faster can training get
without faster products": target tokens/s if everything but the products cost nothing.
``--isa avx2`` restarts the script with the libraries restricted to AVX2 (``benchmarks/_isa.py``:
an emulation of an AVX2 machine on this CPU, which the machine record says). Figures and the
machine record (load average before and after) also go to ``--json``. Under the profiler an
update runs a few percent slower than without it: the shares, not the absolute times, are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _isa  # noqa: E402  (before torch: --isa avx2 restarts this script with the AVX2 limits)

if __name__ == "__main__":
    _isa.reexec_for_isa()

# isort: split
import syntaxnmt.__main__  # noqa: F401  (first: the command's OpenMP defaults, set before torch loads)

# isort: split
import torch
from speed import training_task  # noqa: E402
from torch.profiler import ProfilerActivity, profile

from syntaxnmt.config import load_config
from syntaxnmt.cpu import calibration as kernels
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.runtime import keep_freed_memory
from syntaxnmt.textio import atomic_write_text

PRODUCTS = ("aten::mm", "aten::addmm")


def large_product_gflops(n: int = 4096, repeats: int = 3) -> float:
    """GFLOP/s of the fastest of ``repeats`` float32 products n x n x n (torch's matmul: MKL)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def profile_updates(task, stream, updates: int, warmup: int) -> tuple[list, int]:
    """The profiler's per-operator averages over ``updates`` updates after ``warmup`` untimed
    ones, and the target tokens of the profiled updates."""
    for u in range(warmup):
        task.update([next(stream)[2]], u)
    tokens = 0
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for u in range(updates):
            tokens += task.update([next(stream)[2]], warmup + u)["tokens"]
    return list(prof.key_averages()), tokens


def summarize(events, updates: int, tokens: int, top: int) -> dict:
    """Per update: the products' GFLOP, ms and GFLOP/s, their share of the self CPU time, the
    ``top`` operators by self time, and tokens/s if only the products took time."""
    total_us = sum(e.self_cpu_time_total for e in events)
    products = [e for e in events if e.key in PRODUCTS]
    flops = sum(e.flops for e in products)
    product_us = sum(e.self_cpu_time_total for e in products)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {
        "updates": updates,
        "tgt_tokens_per_update": tokens / updates,
        "self_ms_per_update": total_us / updates / 1e3,
        "products_gflop_per_update": flops / updates / 1e9,
        "products_ms_per_update": product_us / updates / 1e3,
        "products_gflops": flops / (product_us / 1e6) / 1e9 if product_us else 0.0,
        "products_share": product_us / total_us if total_us else 0.0,
        "tok_s_products_only": tokens / (product_us / 1e6) if product_us else 0.0,
        "tok_s_profiled": tokens / (total_us / 1e6) if total_us else 0.0,
        "top": [{"name": e.key, "self_ms_per_update": e.self_cpu_time_total / updates / 1e3, "share": e.self_cpu_time_total / total_us, "calls_per_update": e.count / updates} for e in ranked],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="benchmarks/out/side_by_side/syntaxnmt.yaml")
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15, help="operators listed by self CPU time")
    ap.add_argument("--reference", type=int, default=4096, help="size n of the reference product n x n x n")
    ap.add_argument("--row-packing", choices=("on", "off"), default="on", help="train.row_packing of the profiled updates")
    ap.add_argument("--json", default="benchmarks/out/update_profile.json", help="figures and the machine record")
    _isa.add_isa_argument(ap)
    args = ap.parse_args()
    if not Path(args.config).is_file():
        sys.exit(f"update_profile: {args.config} not found (benchmarks/side_by_side.py writes the default; or give --config)")
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the syntaxnmt command does (a new large tensor is otherwise fresh pages: faults and zeroing)
    machine = machine_info()
    reference = large_product_gflops(args.reference)
    cfg = load_config(args.config)
    cfg.train.row_packing = args.row_packing
    os.environ[kernels.ENV] = "aten"  # the products the profiler counts; wins over train.cpu_kernels and the caller's setting
    task, stream = training_task(cfg, torch.device("cpu"))
    events, tokens = profile_updates(task, stream, args.updates, args.warmup)
    s = summarize(events, args.updates, tokens, args.top)
    for row in s["top"]:
        print(f"{row['name'][:60]:60s} {row['self_ms_per_update']:9.1f} ms {row['share']:7.1%} {row['calls_per_update']:8.1f} calls")
    print(f"products (aten::mm, aten::addmm): {s['products_gflop_per_update']:.1f} GFLOP and {s['products_ms_per_update']:.0f} ms per update, "
          f"{s['products_gflops']:.1f} GFLOP/s ({s['products_gflops'] / reference:.0%} of {reference:.1f} GFLOP/s on a {args.reference}^3 product), "
          f"{s['products_share']:.1%} of the self CPU time ({s['self_ms_per_update']:.0f} ms per update)")
    print(f"target tokens/s: {s['tok_s_profiled']:.0f} profiled; {s['tok_s_products_only']:.0f} if everything but the products cost nothing")
    print(machine_summary(machine))
    record = {"setting": vars(args), "machine": with_load_after(machine), "large_product_gflops": reference, **s}
    atomic_write_text(Path(args.json), json.dumps(record, indent=1))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
