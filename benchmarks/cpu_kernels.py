"""The CPU kernel calibration's table on this machine: oneDNN against ATen per linear shape.

    python benchmarks/cpu_kernels.py [--d-model 256] [--ffn-dim 1024] [--vocab 8000] [--threads 1] [--budget 2]

Runs the calibration of ``train.cpu_kernels: auto`` (syntaxnmt/model/kernels.py) afresh, without
reading or writing the user's cache, on the weight shapes of a Transformer with these sizes (the
side-by-side model by default: attention projections d x d, FFN d x f and f x d, output d x V;
the most frequent first, as in the model),
forward alone (``infer``) and forward with both gradients (``train``), at each of
``kernels.ROWS`` row counts, within ``--budget`` seconds (the commands' budget by default; a
larger one times the large products too). Prints per product the fastest of 3 runs of each path
(after a warm-up run), the path chosen and the ratio, then the machine record (load average before
and after); both go to ``--json`` (default benchmarks/out/cpu_kernels.json). Times, not a timed test:
on a busy machine they move from run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from syntaxnmt.model import kernels  # noqa: E402
from syntaxnmt.model.linear import Linear  # noqa: E402
from syntaxnmt.runtime import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--ffn-dim", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=float, default=kernels.BUDGET_S, help=f"seconds of measuring (default {kernels.BUDGET_S}, as the commands)")
    ap.add_argument("--json", default="benchmarks/out/cpu_kernels.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d, f, v = args.d_model, args.ffn_dim, args.vocab
    # as many of each as in two layers (the calibration times the most frequent shapes first)
    model = nn.Sequential(*[Linear(d, d) for _ in range(8)], *[Linear(d, f) for _ in range(2)], *[Linear(f, d) for _ in range(2)], Linear(d, v))
    machine = machine_info()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SYNTAXNMT_CACHE_DIR"] = cache  # measure afresh, leave the user's cache alone
        start = time.perf_counter()
        summary = kernels.prepare(model, "auto", ("infer", "train"), budget_s=args.budget)
        wall = time.perf_counter() - start
    machine["cpu_kernels"] = summary
    print(f"calibration: {summary['measured']} products in {wall:.2f} s (budget {args.budget:g} s), {args.threads} thread(s); times in ms, fastest of {kernels.REPEATS}")
    print("| kind | shape (in x out) | rows | oneDNN ms | ATen ms | chosen | ATen / oneDNN |")
    print("|---|---|---|---|---|---|---|")
    for row in summary.get("table", []):
        print(f"| {row['kind']} | {row['shape']} | {row['rows']} | {row['onednn_ms']:.3f} | {row['aten_ms']:.3f} | {row['choice']} | {row['aten_ms'] / row['onednn_ms']:.2f} |")
    if summary.get("untimed"):
        print(f"not timed within the budget (they take the path that won their row count and kind): {', '.join(summary['untimed'])}")
    if summary.get("reason"):
        print(f"no calibration: {summary['reason']}")
    print(machine_summary(with_load_after(machine)))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(wall, 3), "calibration": summary, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
