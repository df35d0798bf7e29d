"""How much of a CPU training update is matrix products, and the speed that leaves at best.

    python benchmarks/cpu_floor.py [--config benchmarks/out/side_by_side/syntaxnmt.yaml]
        [--updates 8] [--warmup 4] [--threads 2] [--peer-json benchmarks/out/side_by_side.json]
        [--profile N]

Issue 14 asks for CPU training at 1.5x the fastest peer. This script measures how far that is
from what the arithmetic allows on this machine. It trains the side-by-side model (the config
``benchmarks/side_by_side.py`` writes) as ``benchmarks/speed.py`` does and, for the same updates:

1. times the whole updates (target tokens/s);
2. records every matrix product the updates made through oneDNN (``syntaxnmt.cpu.linear``: the
   linears' forward, both gradients, and the fused output loss), with its shapes and strides, and
   replays exactly those products alone, on fresh tensors: the time the products need;
3. counts their floating-point operations (2 m n k each) and the rate they ran at;
4. prints the share of real tokens among the padded positions the products run on, over one
   epoch of batches, with per-batch shapes and with the bucketed static shapes of CPU training;
5. with ``--profile N``: the torch.profiler table (ops by self CPU time) of N more updates.

``tokens / product time`` is the speed the update would have if everything else (attention,
layer norm, dropout, the optimizer, Python) were free. With ``--peer-json`` (the side-by-side
results), the fastest peer's training tokens/s is printed beside it. The figures and the machine
(``syntaxnmt.cpu.machine.machine_info``, load average before and after) also go to ``--json``
(default benchmarks/out/cpu_floor.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed import training_task  # noqa: E402

from syntaxnmt.config import load_config  # noqa: E402
from syntaxnmt.cpu import linear as linear_module  # noqa: E402
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.data.batches import TokenBatchSampler, round_up  # noqa: E402
from syntaxnmt.runtime import keep_freed_memory  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402

Product = tuple[tuple, tuple, tuple, tuple, bool]  # x shape, x stride, w shape, w stride, has bias


def record_products(run) -> list[Product]:
    """The oneDNN products ``run()`` makes: shapes and strides of every ``_dnn`` call."""
    products: list[Product] = []
    original = linear_module._dnn

    def recording(x, w, b):
        products.append((tuple(x.shape), tuple(x.stride()), tuple(w.shape), tuple(w.stride()), b is not None))
        return original(x, w, b)

    linear_module._dnn = recording
    try:
        run()
    finally:
        linear_module._dnn = original
    return products


def replay_seconds(products: list[Product], repeats: int = 3) -> float:
    """Best time of ``repeats`` replays of ``products`` on fresh random tensors with the same layouts."""
    operands = []
    for xs, xst, ws, wst, bias in products:
        x = torch.empty_strided(xs, xst).normal_()
        w = torch.empty_strided(ws, wst).normal_()
        operands.append((x, w, torch.zeros(ws[0]) if bias else None))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for x, w, b in operands:
            linear_module._dnn(x, w, b)
        best = min(best, time.perf_counter() - start)
    return best


def flops(products: list[Product]) -> float:
    return sum(2.0 * xs[0] * xs[1] * ws[0] for xs, _, ws, _, _ in products)


def padding(src_lens, tgt_lens, max_tokens: int, seed: int, multiple: int) -> tuple[float, float]:
    """Real tokens / padded positions (source, target) over one epoch of training batches, with
    per-batch shapes (``multiple`` 0) or bucketed static shapes (``batches.shape_bucket``: both
    sides padded to one length, a multiple of ``multiple``, and rows added up to
    ``max_tokens // length``)."""
    real_s = real_t = pad_s = pad_t = 0
    for idx in TokenBatchSampler(src_lens, tgt_lens, max_tokens, seed, multiple=multiple).epoch_batches(0):
        s, t = src_lens[idx] + 1, tgt_lens[idx] + 1
        real_s, real_t = real_s + int(s.sum()), real_t + int(t.sum())
        if multiple > 1:
            length = int(round_up(max(s.max(), t.max()), multiple))
            rows = max(len(idx), max_tokens // length)
            pad_s, pad_t = pad_s + rows * length, pad_t + rows * length
        else:
            pad_s, pad_t = pad_s + len(idx) * int(s.max()), pad_t + len(idx) * int(t.max())
    return real_s / pad_s, real_t / pad_t


def fastest_peer(path: Path) -> tuple[str, float] | None:
    """(toolkit, training tokens/s) of the fastest peer in a side-by-side results file."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    peers = [(name, r["train_tok_s"]) for name, r in data.get("medians", {}).items() if name != "syntaxnmt" and r.get("train_tok_s")]
    return max(peers, key=lambda p: p[1]) if peers else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="benchmarks/out/side_by_side/syntaxnmt.yaml")
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer-json", default="benchmarks/out/side_by_side.json")
    ap.add_argument("--profile", type=int, default=0, help="also print the torch.profiler table of this many more updates")
    ap.add_argument("--json", default="benchmarks/out/cpu_floor.json", help="figures and the machine record")
    args = ap.parse_args()
    if not linear_module.enabled():
        sys.exit("cpu_floor: oneDNN linears are off (SYNTAXNMT_ONEDNN_LINEAR=0 or no oneDNN): nothing to record")
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    machine = machine_info()
    cfg = load_config(args.config)
    task, stream = training_task(cfg, torch.device("cpu"), choose_kernels=False)  # the script's fixed oneDNN path
    t = cfg.train
    for u in range(args.warmup):
        task.update([next(stream)[2] for _ in range(t.accum_steps)], u)
    groups = [[next(stream)[2] for _ in range(t.accum_steps)] for _ in range(args.updates)]
    tokens = 0
    start = time.perf_counter()
    for u, group in enumerate(groups):
        tokens += task.update(group, args.warmup + u)["tokens"]
    update_s = time.perf_counter() - start
    products = record_products(lambda: [task.update(g, 0) for g in groups])
    product_s = replay_seconds(products)
    gflop = flops(products) / 1e9
    print(f"{args.updates} updates of the side-by-side model, {torch.get_num_threads()} threads, {tokens / args.updates:.0f} target tokens per update")
    print(f"whole updates:        {update_s / args.updates * 1000:7.0f} ms per update, {tokens / update_s:7.0f} target tok/s")
    print(f"matrix products only: {product_s / args.updates * 1000:7.0f} ms per update ({100 * product_s / update_s:.0f}% of it), "
          f"{len(products) // args.updates} products, {gflop / args.updates:.1f} GFLOP per update at {gflop / product_s:.0f} GFLOP/s")
    print(f"speed if all else were free: {tokens / product_s:7.0f} target tok/s ({update_s / product_s:.2f}x today's)")
    lens = task.split["src"].lengths, task.split["tgt"].lengths
    figures = {"updates": args.updates, "threads": torch.get_num_threads(), "tokens_per_update": tokens / args.updates, "update_ms": update_s / args.updates * 1000,
               "train_tok_s": tokens / update_s, "product_ms": product_s / args.updates * 1000, "products_per_update": len(products) // args.updates,
               "gflop_per_update": gflop / args.updates, "gflop_s": gflop / product_s, "tok_s_if_only_products": tokens / product_s, "real_over_padded": {}}
    for multiple in sorted({0, task.t.shape_bucket}):
        fs, ft = padding(*lens, t.max_tokens, cfg.seed, multiple)
        figures["real_over_padded"][f"shape_bucket {multiple}"] = {"source": fs, "target": ft}
        print(f"real tokens / padded positions, {'per-batch shapes' if multiple <= 1 else f'bucketed shapes (shape_bucket {multiple})'}: source {fs:.3f}, target {ft:.3f}")
    peer = fastest_peer(Path(args.peer_json))
    if peer:
        name, tok_s = peer
        print(f"fastest peer in {args.peer_json}: {name} {tok_s:.0f} tok/s; today {tokens / update_s / tok_s:.2f}x it, "
              f"at most {tokens / product_s / tok_s:.2f}x it with free non-product work; 1.5x it is {1.5 * tok_s:.0f} tok/s")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        more = [[next(stream)[2] for _ in range(t.accum_steps)] for _ in range(args.profile)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for g in more:
                task.update(g, 0)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    with_load_after(machine)
    print(machine_summary(machine))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "config": args.config,
           **figures, "fastest_peer": dict(zip(("toolkit", "train_tok_s"), peer)) if peer else None, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
