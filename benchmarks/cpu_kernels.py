"""The whole-step CPU kernel calibration's table on this machine: ms per step of each candidate.

    python benchmarks/cpu_kernels.py [--d-model 256] [--ffn-dim 1024] [--layers 3] [--heads 4]
        [--vocab 8000] [--max-tokens 4096] [--length 20] [--threads 1] [--budget 15]

Runs the calibration of ``train.cpu_kernels: auto`` (syntaxnmt/cpu/calibration.py) afresh, without
reading or writing the user's cache, on a Transformer of these sizes (the recipe model of the
side-by-side by default: d_model 256, FFN 1024, 3+3 layers, 8k joint vocabulary), as a run does at
start-up: training steps (forward and backward of one batch of ``--max-tokens`` tokens, sentences
of ``--length`` - 4 to ``--length`` pieces, padded to the CPU shape bucket) of the candidates
kernels {oneDNN, ATen, OpenBLAS} x row packing {on, off}, then decoding steps (a forced beam-5
decode of 8 sentences, 10 steps) of {oneDNN, ATen}, each within ``--budget`` seconds. Prints per candidate
the fastest timed step (after a warm-up step) and the one chosen, then the machine record (load
average before and after); both go to ``--json`` (default benchmarks/out/cpu_kernels.json).
Times, not a timed test: on a busy machine they move from run to run. The threads wait as the
``syntaxnmt`` command makes them (``GOMP_SPINCOUNT``, ``OPENBLAS_THREAD_TIMEOUT``:
syntaxnmt/__main__.py) unless set in the environment: a run with libgomp's and OpenBLAS's own
long spins timed OpenBLAS's steps 1.7-15x slower than ATen's, as the pools held each other's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import syntaxnmt.__main__  # noqa: E402,F401  (first: the command's waiting defaults, set before torch and numpy load)

# isort: split
import numpy as np  # noqa: E402
import torch  # noqa: E402

from syntaxnmt.config import CPU_SHAPE_BUCKET, load_config  # noqa: E402
from syntaxnmt.cpu import calibration as kernels  # noqa: E402
from syntaxnmt.cpu import install as install_cpu  # noqa: E402
from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.data.batches import make_batch, pad_batch, shape_bucket  # noqa: E402
from syntaxnmt.decoding.calibration import decoding_step  # noqa: E402
from syntaxnmt.model import build_model  # noqa: E402
from syntaxnmt.textio import atomic_write_text  # noqa: E402
from syntaxnmt.training.step import forward_backward  # noqa: E402


def training_timing(model, cfg, length: int):
    """``kernels.prepare``'s ``timing`` for a synthetic training batch shaped as the recipe's."""
    t = cfg.train.for_device("cpu")
    gen = np.random.default_rng(0)
    rows = t.max_tokens // (length + 1)
    vocab = model.tgt_embed.tokens.num_embeddings
    src = [gen.integers(4, vocab, size=gen.integers(length - 4, length + 1)) for _ in range(rows)]
    tgt = [gen.integers(4, vocab, size=gen.integers(length - 4, length + 1)) for _ in range(rows)]
    batch = make_batch(src, tgt, list(range(rows)))
    batch = pad_batch(batch, *shape_bucket(batch, t.max_tokens, t.shape_bucket))
    n_tokens = sum(len(x) + 1 for x in tgt)

    def run():
        model.train()
        for p in model.parameters():
            p.grad = None
        forward_backward(model, batch, t, (), 0, 1.0 / n_tokens)

    return f"benchmark train {kernels.model_signature(model)} | batch {tuple(batch.src.shape)} {tuple(batch.tgt_in.shape)}", run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--ffn-dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--length", type=int, default=20, help="the batch's longest sentence, in pieces (default 20: the recipe's median)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=float, default=kernels.BUDGET_S, help=f"seconds of stepping per calibration (default {kernels.BUDGET_S:g}, as the commands)")
    ap.add_argument("--json", default="benchmarks/out/cpu_kernels.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_tree = {"arch": "transformer", "d_model": args.d_model, "heads": args.heads, "ffn_dim": args.ffn_dim, "enc_layers": args.layers, "dec_layers": args.layers, "norm": "pre", "tie_embeddings": "all", "dropout": 0.2}
    cfg = load_config(None, {"model": model_tree, "train": {"max_tokens": args.max_tokens, "device": "cpu"}})
    model = install_cpu(build_model(cfg, args.vocab, args.vocab))  # as training does (syntaxnmt.cpu)
    machine = machine_info()
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SYNTAXNMT_CACHE_DIR"] = cache  # measure afresh, leave the user's cache alone
        os.environ.pop(kernels.ENV, None)
        start = time.perf_counter()
        results["train"] = kernels.prepare(model, "auto", row_packing="auto", timing=lambda: training_timing(model, cfg, args.length), budget_s=args.budget)
        results["infer"] = kernels.prepare(model, "auto", timing=lambda: decoding_step(model), budget_s=args.budget)
        wall = time.perf_counter() - start
    print(f"whole-step calibration: {wall:.2f} s in all (budget {args.budget:g} s each), {args.threads} thread(s), shape bucket {CPU_SHAPE_BUCKET}; ms per step, the fastest of the timed steps after a warm-up step")
    print("| step | candidate | ms/step | timed steps | chosen |")
    print("|---|---|---|---|---|")
    for kind, summary in results.items():
        if "ms" not in summary:
            print(f"| {kind} | {summary['choice']} | - | - | yes ({summary['reason']}) |")
            continue
        what = "training (forward + backward)" if kind == "train" else "beam-5 decoding (8 x 10 steps)"
        for name, ms in sorted(summary["ms"].items(), key=lambda kv: kv[1]):
            print(f"| {what} | {name} | {ms:.1f} | {summary['steps'][name]} | {'**chosen**' if name == summary['choice'] else ''} |")
    print(machine_summary(with_load_after(machine)))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(wall, 3), "calibration": results, "machine": machine}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
