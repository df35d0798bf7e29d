"""Process memory over a long CPU training run: bucketed batch shapes against dynamic ones.

    python benchmarks/memory_curve.py --config benchmarks/out/side_by_side/syntaxnmt.yaml \
        [--variants bucket4:1000,dynamic-onednn:200] [--every 10] [--json benchmarks/out/memory_curve.json]

oneDNN keeps state per problem shape, so training on its linears with a new batch shape at
every update makes the process grow (syntaxnmt/cpu/linear.py). Each variant (``NAME:UPDATES``)
trains in a fresh process of this script (``--one NAME``) and records, every ``--every``
updates, the resident set size (VmRSS) and its peak so far (VmHWM), in MB. Variants as in
``cpu_training_ab.py``: ``bucketN`` (static shapes, oneDNN linears: the CPU default with N=4),
``dynamic-onednn`` (every batch its own shape, oneDNN linears), ``dynamic-mkl``, ``bucketN-mkl``.
The summary gives each variant's peak after 10% of its updates and at the end: flat means the
two are about equal. The JSON also holds the machine (``syntaxnmt.cpu.machine.machine_info``, load
average before and after).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_training_ab import Variant  # noqa: E402

from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.runtime import keep_freed_memory  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402


def memory_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def one(name: str, config: str, updates: int, every: int, overrides: list[str]) -> dict:
    """Train variant ``name`` for ``updates`` updates; memory every ``every`` updates."""
    keep_freed_memory()
    v = Variant(name, config, overrides)
    curve, tokens, start = [], 0, time.perf_counter()
    for done in range(every, updates + every, every):
        tokens += v.run(min(every, updates - v.step))[0]
        rss, peak = memory_mb()
        curve.append({"update": v.step, "rss_mb": round(rss, 1), "peak_mb": round(peak, 1), "seconds": round(time.perf_counter() - start, 1)})
        print(f"{name} update {v.step}: RSS {rss:.0f} MB, peak {peak:.0f} MB", file=sys.stderr, flush=True)
    return {"variant": name, "updates": updates, "threads": torch.get_num_threads(), "tokens": tokens, "curve": curve}


def summary(res: dict) -> str:
    curve = res["curve"]
    early = curve[max(0, len(curve) // 10 - 1)]
    end = curve[-1]
    return (f"{res['variant']:<16} peak {early['peak_mb']:.0f} MB at update {early['update']}, {end['peak_mb']:.0f} MB at update {end['update']} "
            f"(x{end['peak_mb'] / early['peak_mb']:.2f}); RSS at the end {end['rss_mb']:.0f} MB; {res['tokens'] / end['seconds']:.0f} tgt tok/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--variants", default="bucket4:1000,dynamic-onednn:200")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--json", default="benchmarks/out/memory_curve.json")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # NAME:UPDATES, run in this process
    args, overrides = ap.parse_known_args()
    if args.one:
        if args.threads:
            torch.set_num_threads(args.threads)
        name, updates = args.one.split(":")
        print("RESULT " + json.dumps(one(name, args.config, int(updates), args.every, overrides)))
        return 0
    results, machine = [], machine_info()
    for spec in args.variants.split(","):
        cmd = [sys.executable, __file__, "--config", args.config, "--every", str(args.every), "--threads", str(args.threads), "--one", spec.strip(), *overrides]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
        results.append(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]))
        print(summary(results[-1]), flush=True)
    print(machine_summary(with_load_after(machine)) + f" (variants' threads: {args.threads or 'torch default'})")
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
