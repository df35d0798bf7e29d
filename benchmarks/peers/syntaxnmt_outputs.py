"""What syntaxnmt computes in the side-by-side benchmark, at whatever revision is on PYTHONPATH:
the loss of every training update and the decoded token ids, for ``side_by_side.py --against REF``.

    python benchmarks/peers/syntaxnmt_outputs.py train  --config CFG --updates 100 --out FILE
    python benchmarks/peers/syntaxnmt_outputs.py decode --config CFG --test-src FILE --beam 5 --force-length 20 --out FILE

Not timed. It does the work of ``run_syntaxnmt.py``'s processes with the measuring functions'
own setup -- ``speed.training_task`` and the updates ``measure_training`` runs (the first
``--updates`` batches of the seeded stream), ``speed.decoding_setup`` and ``translate_ids`` as
``measure_decoding`` calls them -- and keeps what those discard: each update's summed loss (and
target tokens), each sentence's best hypothesis (token ids). ``speed`` is imported from the
``benchmarks/`` folder beside the ``syntaxnmt`` package that Python loads, so the revision's own
``speed.py`` runs; the few names whose module moved in issue 48 (the thread policy, the machine
record) are looked up where each revision has them. One JSON file out (``--out``).
"""

from __future__ import annotations

import syntaxnmt.__main__  # noqa: F401  (first: the command's OpenMP defaults, set before torch loads)

# isort: split
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

import syntaxnmt

sys.path.insert(0, str(Path(syntaxnmt.__file__).resolve().parents[1] / "benchmarks"))  # that revision's speed.py
import speed  # noqa: E402

from syntaxnmt.config import load_config  # noqa: E402
from syntaxnmt.data.subwords import BOS, EOS, PAD  # noqa: E402
from syntaxnmt.decoding.translate import translate_ids  # noqa: E402
from syntaxnmt.runtime import keep_freed_memory, resolve_device  # noqa: E402
from syntaxnmt.textio import atomic_write_text, read_lines  # noqa: E402

try:
    from syntaxnmt.cpu.machine import machine_info  # noqa: E402
    from syntaxnmt.cpu.threads import configure_threads  # noqa: E402
except ImportError:  # before issue 48 (4ddc2eb and earlier): in runtime
    from syntaxnmt.runtime import configure_threads, machine_info  # noqa: E402


def train_losses(cfg, device, updates: int) -> dict:
    """The summed loss and the target tokens of updates 1..``updates``, as ``measure_training`` runs them."""
    task, stream = speed.training_task(cfg, device)
    losses, tokens = [], []
    for u in range(updates):
        stats = task.update([next(stream)[2] for _ in range(cfg.train.accum_steps)], u)
        losses.append(float(stats["loss"]))
        tokens.append(int(stats["tokens"]))
    return {"losses": losses, "tokens": tokens}


def decoded(cfg, device, test_src: Path, beam: int, force_length: int) -> dict:
    """The best hypothesis of every line of ``test_src`` (token ids, without padding, BOS and EOS)."""
    model, toks, dec = speed.decoding_setup(cfg, device, None, beam, force_length)
    sources = [np.asarray(ids, dtype=np.int64) for ids in toks.src.encode_batch(read_lines(test_src))]
    with torch.inference_mode():
        hyps = translate_ids(model, sources, dec, device)
    return {"hypotheses": [[int(t) for t in nb[0].tokens if t not in (PAD, BOS, EOS)] for nb in hyps]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("train", "decode"))
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True, help="the JSON file written")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--test-src")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--force-length", type=int, default=20)
    args = ap.parse_args()
    cfg = load_config(args.config, [])
    keep_freed_memory()
    device = resolve_device("cpu")
    configure_threads(cfg.train.threads or None)  # as run_syntaxnmt.py's default (--threads policy)
    if args.what == "train":
        res = train_losses(cfg, device, args.updates)
    else:
        res = decoded(cfg, device, Path(args.test_src), args.beam, args.force_length)
    res.update(syntaxnmt=str(Path(syntaxnmt.__file__).resolve().parent), torch_threads=torch.get_num_threads(), cpu_kernels=machine_info()["cpu_kernels"])
    atomic_write_text(args.out, json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
