"""Process memory of oneDNN linear products: many distinct shapes against a few.

    python benchmarks/onednn_shapes.py [--products 200] [--threads 1]

The three products of a training linear (forward ``x W^T``, ``g W``, ``g^T x``) through
``torch.ops.mkldnn._linear_pointwise`` (the op of syntaxnmt/cpu/linear.py), d_model 256 and
FFN 1024, for ``--products`` batches whose row counts are all different (1000, 1007, 1014, ...)
and then, in a fresh process, for the same number of batches cycling over 4 row counts (1024,
2048, 3072, 4096: bucketed shapes). Each in two processes: with glibc's defaults and with
syntaxnmt's ``keep_freed_memory`` (syntaxnmt/runtime.py). Prints the resident set size every 50
batches (MB) and the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and after);
both also go to ``--json`` (default benchmarks/out/onednn_shapes.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.runtime import keep_freed_memory  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402

FEW = (1024, 2048, 3072, 4096)


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def one(shapes: str, products: int, malloc: str) -> list[int]:
    if malloc == "keep":
        keep_freed_memory()
    op = torch.ops.mkldnn._linear_pointwise
    w = torch.randn(1024, 256)
    curve = []
    for i in range(products):
        rows = 1000 + 7 * i if shapes == "distinct" else FEW[i % len(FEW)]
        x = torch.randn(rows, 256)
        y = op(x, w, None, "none", [], "")  # forward
        op(y, w.t(), None, "none", [], "")  # g W
        op(y.t(), x.t(), None, "none", [], "")  # g^T x
        if (i + 1) % 50 == 0:
            curve.append(round(rss_mb()))
    return curve


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="benchmarks/out/onednn_shapes.json", help="curves and the machine record")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # SHAPES MALLOC, in this process
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.one:
        print(" ".join(map(str, one(args.one[0], args.products, args.one[1]))))
        return 0
    machine, curves = machine_info(), {}
    print(f"RSS (MB) every 50 batches of 3 products, {args.threads} thread(s):")
    for shapes in ("distinct", "few"):
        for malloc in ("default", "keep"):
            cmd = [sys.executable, __file__, "--products", str(args.products), "--threads", str(args.threads), "--one", shapes, malloc]
            out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
            curves[f"{shapes} row counts, glibc {malloc}"] = [int(x) for x in out.split()]
            print(f"  {shapes:<8} row counts, glibc {'defaults' if malloc == 'default' else 'keep_freed_memory'}: {out}", flush=True)
    print(machine_summary(with_load_after(machine)))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "products": args.products,
           "threads": args.threads, "rss_mb_every_50": curves, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
