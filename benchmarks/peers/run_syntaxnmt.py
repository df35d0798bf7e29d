"""The syntaxnmt side of benchmarks/side_by_side.py: one measurement per process, one JSON line out.

    python benchmarks/peers/run_syntaxnmt.py train  --config CFG --updates 90 --warmup 10
    python benchmarks/peers/run_syntaxnmt.py decode --config CFG --test-src FILE --beam 5 --force-length 20
    python benchmarks/peers/run_syntaxnmt.py check  --config CFG --test-src FILE --beam 5 --force-length 20

Both call the measuring functions of ``benchmarks/speed.py`` unchanged: ``measure_training``
(target tokens/s over ``--updates`` timed updates after ``--warmup`` untimed ones, the first
updates of epoch 0 of the recipe's batches) and ``measure_decoding`` (beam search over the raw
source lines of ``--test-src``, timed around the search only; freshly initialised model -- with
``--force-length`` every hypothesis has exactly that many subwords, so the weights do not change
the work done). Training and decoding run in separate processes, like the peers', so that the
caller measures the peak memory and the whole-command time of each. ``check`` (not timed) decodes
the first 20 sentences the same way and reports the hypothesis lengths, to verify the forced length.

Threads as with the ``syntaxnmt`` command: its OpenMP defaults are set before torch loads (passive
waiting, ``syntaxnmt/__main__.py``), and ``--threads`` goes to ``cpu.threads.configure_threads``
(``policy``, the default: ``OMP_NUM_THREADS`` if set, else the thread policy; ``N``: N threads;
``torch``: torch's default threads, left alone -- start the process with ``GOMP_SPINCOUNT=300000``
to keep libgomp's own waiting as well, i.e. syntaxnmt before the thread policy).
"""

from __future__ import annotations

import syntaxnmt.__main__  # noqa: F401  (first: the command's OpenMP defaults, set before torch loads)

# isort: split
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ for speed.py
import speed  # noqa: E402

from syntaxnmt.config import load_config  # noqa: E402
from syntaxnmt.cpu.machine import machine_info  # noqa: E402
from syntaxnmt.cpu.threads import configure_threads, describe_threads  # noqa: E402
from syntaxnmt.data.batches import TokenBatchSampler  # noqa: E402
from syntaxnmt.data.prepare import feature_vocab_sizes, load_split, load_tokenizers  # noqa: E402
from syntaxnmt.data.subwords import BOS, EOS, PAD  # noqa: E402
from syntaxnmt.decoding.translate import translate_ids  # noqa: E402
from syntaxnmt.model import build_model  # noqa: E402
from syntaxnmt.runtime import keep_freed_memory, resolve_device  # noqa: E402
from syntaxnmt.textio import read_lines  # noqa: E402


def n_params(cfg) -> int:
    toks = load_tokenizers(cfg)
    model = build_model(cfg.model, len(toks.src), len(toks.tgt), **feature_vocab_sizes(cfg))
    return sum(p.numel() for p in model.parameters())


def train(cfg, device, updates: int, warmup: int) -> dict:
    tok_s = speed.measure_training(cfg, device, updates, warmup)
    # The same batches measure_training used (its order depends only on the seed): their sizes.
    split = load_split(cfg, "train")
    t = cfg.train.for_device(device.type)  # bucketed shapes change the batches (train.shape_bucket)
    sampler = TokenBatchSampler(split["src"].lengths, split["tgt"].lengths, t.max_tokens, cfg.seed, multiple=t.shape_bucket)
    batches = sampler.epoch_batches(0)[warmup * cfg.train.accum_steps : (warmup + updates) * cfg.train.accum_steps]
    tokens = sum(int(split["tgt"].lengths[b].sum()) + len(b) for b in batches)
    return {
        "train_tok_s": tok_s,
        "timed_updates": updates,
        "tokens_per_update": tokens / updates,
        "params": n_params(cfg),
        "batches_per_epoch": len(sampler.epoch_batches(0)),
        "shape_bucket": t.shape_bucket,
    }


def decode(cfg, device, test_src: Path, beam: int, force_length: int) -> dict:
    sent_s, n = speed.measure_decoding(cfg, device, None, test_src, beam, force_length)
    return {"decode_sent_s_own_timer": sent_s, "sentences": n}


def check(cfg, device, test_src: Path, beam: int, force_length: int, n: int = 20) -> dict:
    """Hypothesis lengths of the first ``n`` sentences, decoded as ``measure_decoding`` does."""
    model, toks, dec = speed.decoding_setup(cfg, device, None, beam, force_length)
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(read_lines(test_src)[:n])]
    with torch.inference_mode():
        hyps = translate_ids(model, sources, dec, device)
    return {"hyp_lengths_checked": sorted({sum(1 for t in nb[0].tokens if t not in (PAD, BOS, EOS)) for nb in hyps}), "checked": len(hyps)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("train", "decode", "check"))
    ap.add_argument("--config", required=True)
    ap.add_argument("--updates", type=int, default=90)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--test-src")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--force-length", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", default="policy", help="policy (as the syntaxnmt command), N, or torch (torch's default, left alone)")
    args = ap.parse_args()
    if args.threads not in ("policy", "torch") and not args.threads.isdigit():
        ap.error(f"--threads {args.threads!r}: policy, torch or a number")
    cfg = load_config(args.config, [])
    keep_freed_memory()  # as the syntaxnmt command does
    device = resolve_device(args.device)
    if args.threads != "torch":
        configure_threads(int(args.threads) if args.threads.isdigit() else cfg.train.threads or None)
    if args.what == "train":
        res = train(cfg, device, args.updates, args.warmup)
    elif args.what == "decode":
        res = decode(cfg, device, Path(args.test_src), args.beam, args.force_length)
    else:
        res = check(cfg, device, Path(args.test_src), args.beam, args.force_length)
    res["torch_threads"] = torch.get_num_threads()
    res["threads"] = describe_threads() if args.threads != "torch" else f"{torch.get_num_threads()} (torch's default)"
    res["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    res["gomp_spincount"] = os.environ.get("GOMP_SPINCOUNT")
    res["torch"] = torch.__version__
    res["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # AVX2 under --isa avx2 (benchmarks/_isa.py)
    res["cpu_kernels"] = machine_info()["cpu_kernels"]  # the linear layers' kernels chosen (syntaxnmt.cpu.calibration)
    print("RESULT " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
