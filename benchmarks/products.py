"""The float32 products of CPU training through MKL (ATen) and numpy's OpenBLAS, on this machine.

    python benchmarks/products.py [--rows 3600] [--d-model 256] [--ffn-dim 1024] [--vocab 8000]
        [--rounds 3] [--threads 2] [--json benchmarks/out/products.json]

The shapes are those of an update of the side-by-side model (docs/benchmarks.md, "OpenBLAS
products"): for ``--rows`` packed rows, each linear layer's forward ``x W^T``, input gradient
``g W`` and weight gradient ``g^T x`` (d x d, d x FFN, FFN x d), and the output layer's three
products on a chunk of 1024 rows. Two measurements, each the fastest of ``--rounds`` passes over
all shapes (GFLOP/s per shape and over all of them):

- **alone**: each library in a process of its own (its thread pool alone on the cores);
- **interleaved**: both in one process, the libraries alternating pass by pass, with two torch
  element-wise operators (OpenMP) between products, as in training: the pools then share the
  cores, and a thread of one that spins while waiting holds a core the other needs. The
  ``syntaxnmt`` command's waiting settings apply (``GOMP_SPINCOUNT``, ``OPENBLAS_THREAD_TIMEOUT``,
  ``syntaxnmt/__main__.py``) unless set in the environment.

Prints a table and the machine record (load average before and after); both go to ``--json``.
Speeds, not a timed test: on a busy machine they move from run to run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if "--alone" not in sys.argv:  # a child of one library inherits the environment its parent set
    import syntaxnmt.__main__  # noqa: F401  (first: the command's waiting defaults, set before torch and numpy load)

# isort: split
import torch  # noqa: E402

from syntaxnmt.cpu import blas  # noqa: E402
from syntaxnmt.cpu.blas import openblas_available  # noqa: E402
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402

LIBRARIES = ("mkl", "openblas")


def shapes(rows: int, d: int, ffn: int, vocab: int) -> list[tuple[str, int, int, int]]:
    """(name, M, K, N) of the products of an update's linear layers and output chunk."""
    out = []
    for name, i, o in (("d x d", d, d), ("d -> ffn", d, ffn), ("ffn -> d", ffn, d)):
        out += [(f"{name} x W^T", rows, i, o), (f"{name} g W", rows, o, i), (f"{name} g^T x", o, rows, i)]
    chunk = min(rows, 1024)
    out += [("output x W^T", chunk, d, vocab), ("output g W", chunk, vocab, d), ("output x^T g", d, chunk, vocab)]
    return out


def operands(todo: list[tuple[str, int, int, int]]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen), torch.empty(m, n)) for _, m, k, n in todo]


def one_pass(library: str, ops, between: torch.Tensor | None) -> list[float]:
    """Seconds of each product through ``library``; ``between``: element-wise work before each."""
    times = []
    for a, b, c in ops:
        if between is not None:
            between.relu_()
            between.add_(1.0)
        start = time.perf_counter()
        if library == "mkl":
            torch.mm(a, b, out=c)
        else:
            blas.mm(a, b, c)
        times.append(time.perf_counter() - start)
    return times


def best(passes: list[list[float]]) -> list[float]:
    """Per product, its fastest time over the passes."""
    return [min(t) for t in zip(*passes)]


def measure(libraries: tuple[str, ...], todo, rounds: int, interleaved: bool) -> dict[str, list[float]]:
    ops = operands(todo)
    between = torch.randn(todo[0][1], 1024) if interleaved else None
    passes: dict[str, list[list[float]]] = {lib: [] for lib in libraries}
    for lib in libraries:  # a warm-up pass each
        one_pass(lib, ops, between)
    for r in range(rounds):
        for lib in libraries if r % 2 == 0 else libraries[::-1]:
            passes[lib].append(one_pass(lib, ops, between))
    return {lib: best(p) for lib, p in passes.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3600)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--ffn-dim", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="benchmarks/out/products.json")
    ap.add_argument("--alone", choices=LIBRARIES, help=argparse.SUPPRESS)  # the child process of one library
    args = ap.parse_args()
    if not openblas_available():
        sys.exit("products: numpy's BLAS is not OpenBLAS: nothing to compare")
    torch.set_num_threads(args.threads)
    todo = shapes(args.rows, args.d_model, args.ffn_dim, args.vocab)
    if args.alone:
        print(json.dumps(measure((args.alone,), todo, args.rounds, interleaved=False)[args.alone]))
        return 0
    machine = machine_info()
    seconds: dict[str, dict[str, list[float]]] = {"alone": {}}
    for lib in LIBRARIES:
        child = [sys.executable, __file__, "--alone", lib, *sys.argv[1:]]
        done = subprocess.run(child, capture_output=True, text=True, check=True)
        seconds["alone"][lib] = json.loads(done.stdout.strip().splitlines()[-1])
    seconds["interleaved"] = measure(LIBRARIES, todo, args.rounds, interleaved=True)
    flops = [2.0 * m * k * n for _, m, k, n in todo]
    rate = {how: {lib: [f / t / 1e9 for f, t in zip(flops, ts)] for lib, ts in libs.items()} for how, libs in seconds.items()}
    total = {how: {lib: sum(flops) / sum(ts) / 1e9 for lib, ts in libs.items()} for how, libs in seconds.items()}
    print(f"float32 products of an update's shapes ({args.rows} rows), {args.threads} threads, GFLOP/s (fastest of {args.rounds} passes)")
    print("| product | M x K x N | MKL alone | OpenBLAS alone | MKL interleaved | OpenBLAS interleaved |")
    print("|---|---|---|---|---|---|")
    for i, (name, m, k, n) in enumerate(todo):
        print(f"| {name} | {m} x {k} x {n} | " + " | ".join(f"{rate[how][lib][i]:.0f}" for how in ("alone", "interleaved") for lib in LIBRARIES) + " |")
    print("| **all** | | " + " | ".join(f"**{total[how][lib]:.0f}**" for how in ("alone", "interleaved") for lib in LIBRARIES) + " |")
    for how in ("alone", "interleaved"):
        print(f"OpenBLAS / MKL {how}: {total[how]['openblas'] / total[how]['mkl']:.2f}x")
    with_load_after(machine)
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "shapes": todo, "seconds": seconds, "gflops": rate, "gflops_all": total, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
