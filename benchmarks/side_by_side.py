"""syntaxnmt side by side with fairseq 0.12.2, OpenNMT-py 3.5.1 and Joey NMT 2.3.0, in one run.

    python benchmarks/side_by_side.py [--updates 100] [--repeats 3]
        [--toolkits fairseq,onmt,joey,syntaxnmt] [--tiny] [--no-install] [--isa native|avx2] [--against REF]

Same data, same model, same measurements for every toolkit (method: docs/benchmarks.md, section
"Side-by-side with peer toolkits"):

- Data: ``syntaxnmt prepare`` on Multi30k en->de (``${SYNTAXNMT_DATA:-../shared/data}/multi30k``)
  trains one joint SentencePiece BPE model (vocab 8000, seed 42) and filters the training pairs
  (max 100 pieces, ratio 3); the peers read exactly those pairs, written back as space-separated
  pieces (train, valid, test_2016_flickr), with a vocabulary file made of the same 7996 pieces,
  so all four models have the same vocabulary and the same data.
- Model: Transformer 3+3 layers, d_model 256, 4 heads, FFN 1024, pre-norm, ReLU, sinusoidal
  positions, all embeddings tied, dropout 0.1 (also after the FFN activation; attention dropout 0),
  Adam (0.9, 0.98), inverse square root after 4000 warm-up updates to 7e-4, label smoothing 0.1,
  gradient norm clipped at 1, seed 42, batches of at most 4096 padded tokens (Joey: 8704, it does
  not bucket by length).
- Training: target tokens/s over updates 11..N (N = --updates), from each toolkit's own log with
  a log interval of 10 updates (syntaxnmt: ``benchmarks/speed.py``'s ``measure_training`` with 10
  untimed updates, then N-10 timed ones).
- Decoding: beam 5, batches of 64 sentences, over the 1,000 sentences of test_2016_flickr, every
  hypothesis forced to exactly 20 pieces; sentences/s from the toolkit's own timer and from the
  wall clock of the whole command (start-up and model loading included). Hypothesis lengths are
  checked.
- Memory: peak resident set size (max RSS, from wait4) of the training and of the decoding process.
  syntaxnmt's depends on the CPU kernels its calibration chose (oneDNN keeps state per product
  shape): each round records them (``cpu_kernels``) and the table says when the rounds differ.
- Threads: ``--threads T`` sets OMP_NUM_THREADS/MKL_NUM_THREADS for every toolkit; without it each
  runs as its users get it: the peers with torch's default, syntaxnmt as its command does
  (passive OpenMP waiting and the thread policy, docs/benchmarks.md "Thread policy").
- The machine: ``syntaxnmt.cpu.machine.machine_info`` (CPU, instruction-set flags, torch/oneDNN/MKL,
  thread settings, load average before and after the run) in the results file and the output.
- ``--isa avx2``: every toolkit's processes run with ATen, oneDNN, MKL (and CTranslate2) restricted
  to AVX2 (``benchmarks/_isa.py``): an emulation of an AVX2 machine on this CPU, which the machine
  record says. Its figures go to their own file (``side_by_side-avx2.json``) and are never merged
  with native ones.
- ``--against REF``: syntaxnmt at git revision REF as one more toolkit of the same rounds,
  ``syntaxnmt@<sha7>`` (this checkout against the commit before a change: one machine, one hour).
  REF is checked out in a detached worktree ``WORK/revisions/<sha>`` (made once, reused while it is
  a clean checkout of REF), its native extension built in place from its own pyproject.toml, and
  its own ``benchmarks/peers/run_syntaxnmt.py`` runs with PYTHONPATH set to it, on the same prepared
  data and setting (its own run folder ``WORK/syntaxnmt@<sha7>``); each syntaxnmt has its own
  calibration cache there; the two swap places in even rounds. The ratios this checkout / REF
  (medians and per round) are printed and stored (``against``), and, untimed,
  ``benchmarks/peers/syntaxnmt_outputs.py`` compares the two sides' training losses per update and
  decoded token ids with the CPU kernels fixed to ATen on both (docs/benchmarks.md, "Against a git
  revision").

Each toolkit runs in its own process, one after another, round-robin over --repeats rounds;
medians are reported with the ratios syntaxnmt/peer. Results and the exact command go to
``benchmarks/out/side_by_side.json`` (``side_by_side-tiny.json`` with --tiny). The file keeps
every toolkit's latest figures: a run on a subset (``--toolkits syntaxnmt``) replaces the figures
of the toolkits it measured and keeps the others' (when they were measured with the same setting),
with the date and command of each run in ``invocations``; the prepared data,
configs and logs stay in ``benchmarks/out/side_by_side/``. ``--tiny`` checks the pipeline end to
end: 20 updates (11..20 measured), 20 test sentences, one round (minutes on a quiet machine).
"""

from __future__ import annotations

import sys

import _isa  # first: --isa avx2 restarts this script with the AVX2 limits, before torch loads

if __name__ == "__main__":
    _isa.reexec_for_isa()

# isort: split
import argparse
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

from syntaxnmt.cpu.machine import THREAD_VARIABLES, describe_isa_limits, isa_limits, machine_info, machine_summary, with_load_after
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "benchmarks" / "peers"
VENVS = Path(os.environ.get("PEERS_VENVS", PEERS_DIR / "venvs"))
OUT = ROOT / "benchmarks" / "out"

TOOLKITS = ("fairseq", "onmt", "joey", "syntaxnmt")
PEERS = ("fairseq", "onmt", "joey")
NAMES = {"fairseq": "fairseq 0.12.2", "onmt": "OpenNMT-py 3.5.1", "joey": "Joey NMT 2.3.0", "syntaxnmt": "syntaxnmt"}

# The common setting (docs/benchmarks.md). Every toolkit's configuration below is written from it.
SEED = 42
VOCAB = 8000
LAYERS, D_MODEL, HEADS, FFN = 3, 256, 4, 1024
DROPOUT = 0.1
LR, WARMUP = 7e-4, 4000
BETAS = (0.9, 0.98)
LABEL_SMOOTHING = 0.1
CLIP_NORM = 1.0
MAX_TOKENS = 4096
JOEY_BATCH = 8704  # padded tokens: Joey batches in random order (no length bucketing)
ONMT_BUCKET = 32768  # examples sorted into batches at a time: one pass over the 29k pairs (default 262144 = 9 passes, 3.5 GB)
LOG_INTERVAL = 10
SKIP_UPDATES = 10  # updates 1..10 hold start-up work and are not measured
BEAM, FORCE_LEN, DECODE_BATCH = 5, 20, 64
TINY_SENTENCES = 20

# Metrics: (key, label, higher is better)
METRICS = (
    ("train_tok_s", "train tok/s", True),
    ("decode_sent_s", "decode sent/s", True),
    ("decode_sent_s_wall", "sent/s whole cmd", True),
    ("train_peak_mb", "train RSS MB", False),
    ("decode_peak_mb", "decode RSS MB", False),
)


def log(msg: str) -> None:
    print(f"[side-by-side] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# processes


def clean_env(threads: int, isa: str = "native") -> dict:
    """The environment of every toolkit's processes: this one's without a virtualenv or Python
    path, with ``isa``'s instruction-set limits (``benchmarks/_isa.py``) and ``threads`` (0: unset)."""
    env = {k: v for k, v in _isa.child_env(isa).items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # the peers' checkpoints hold more than tensors
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_measured(cmd: list[str], log_path: Path, env: dict, cwd: Path, stdout_path: Path | None = None, stdin_path: Path | None = None) -> dict:
    """Run ``cmd``; stderr (and stdout unless ``stdout_path``) to ``log_path``. Returns the exit
    code, the wall-clock seconds and the peak RSS (MB) of the process (wait4's ru_maxrss, which
    covers its waited-for children too)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as logf:
        logf.write("$ " + shlex.join(cmd) + "\n")
        logf.flush()
        out = open(stdout_path, "w") if stdout_path else logf
        inp = open(stdin_path) if stdin_path else subprocess.DEVNULL
        try:
            start = time.perf_counter()
            p = subprocess.Popen(cmd, stdout=out, stderr=logf, stdin=inp, env=env, cwd=cwd)
            try:
                _, status, usage = os.wait4(p.pid, 0)
            except BaseException:  # Ctrl-C or SIGTERM (stop_on_sigterm): no toolkit left training behind
                p.kill()
                p.wait()
                raise
            wall = time.perf_counter() - start
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if stdout_path:
                out.close()
            if stdin_path:
                inp.close()
    return {"rc": p.returncode, "wall_s": wall, "peak_mb": usage.ru_maxrss / 1024}


def stop_on_sigterm() -> None:
    """Make SIGTERM end this benchmark as Ctrl-C does, through exceptions, so that
    :func:`run_measured` kills the toolkit process it waits for (by default SIGTERM ends Python at
    once and the child goes on training, slowing whatever is measured next)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def check_rc(res: dict, what: str, log_path: Path) -> None:
    if res["rc"] != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise Failure(f"{what} failed with exit code {res['rc']} (log {log_path}):\n{tail}")


def run_quiet(cmd: list[str], log_path: Path, env: dict, cwd: Path, what: str) -> None:
    res = run_measured(cmd, log_path, env, cwd)
    check_rc(res, what, log_path)


def venv_bin(name: str, tool: str) -> str:
    return str(VENVS / name / "bin" / tool)


# ----------------------------------------------------------------------------------------------
# shared data


def syntaxnmt_config(work: Path, data_dir: Path, work_dir: Path | None = None) -> str:
    """syntaxnmt's configuration of the common setting; ``work_dir`` (default ``WORK/syntaxnmt/run``):
    the run folder, the one thing that differs for a revision measured with ``--against``."""
    mt = data_dir / "multi30k"
    return f"""# written by benchmarks/side_by_side.py: the common setting of the side-by-side benchmark
name: side-by-side-syntaxnmt
work_dir: {work_dir or work / 'syntaxnmt' / 'run'}
seed: {SEED}
data:
  train_src: {mt / 'train.en.gz'}
  train_tgt: {mt / 'train.de.gz'}
  dev_src: {mt / 'val.en.gz'}
  dev_tgt: {mt / 'val.de.gz'}
  src_lang: en
  tgt_lang: de
  prepared_dir: {work / 'data' / 'syntaxnmt-prepared'}
  spm_model_type: bpe
  vocab_size: {VOCAB}
  joint_vocab: true
  max_len: 100
  max_len_ratio: 3.0
model:
  arch: transformer
  d_model: {D_MODEL}
  heads: {HEADS}
  ffn_dim: {FFN}
  enc_layers: {LAYERS}
  dec_layers: {LAYERS}
  dropout: {DROPOUT}
  attention_dropout: 0.0
  activation: relu
  norm: pre
  positions: sinusoidal
  tie_embeddings: all
train:
  max_tokens: {MAX_TOKENS}
  lr: {LR}
  warmup_steps: {WARMUP}
  adam_betas: [{BETAS[0]}, {BETAS[1]}]
  label_smoothing: {LABEL_SMOOTHING}
  clip_norm: {CLIP_NORM}
  device: cpu
decode:
  beam_size: {BEAM}
  length_penalty: 1.0
  batch_size: {DECODE_BATCH}
"""


def prepare_data(work: Path, data_dir: Path) -> dict:
    """syntaxnmt's prepared corpus, then the same pairs as piece files and vocabularies for the peers."""
    from syntaxnmt.config import load_config
    from syntaxnmt.data.batches import Split
    from syntaxnmt.data.prepare import load_tokenizers, prepare
    from syntaxnmt.textio import read_lines

    cfg_path = work / "syntaxnmt.yaml"
    text = syntaxnmt_config(work, data_dir)
    if not cfg_path.is_file() or cfg_path.read_text() != text:
        cfg_path.write_text(text)
    cfg = load_config(cfg_path)
    counts = prepare(cfg, log=log)
    pieces = work / "data" / "pieces"
    stamp = pieces / "DONE"
    fingerprint = json.dumps({"counts": counts, "meta_mtime": (cfg.prepared_dir / "meta.json").stat().st_mtime_ns}, sort_keys=True)
    info = {"config": str(cfg_path), "prepared": str(cfg.prepared_dir), "pieces": str(pieces), "counts": counts}
    if stamp.is_file() and stamp.read_text() == fingerprint:
        return info | json.loads((pieces / "info.json").read_text())
    log(f"writing the piece files for the peers to {pieces}")
    pieces.mkdir(parents=True, exist_ok=True)
    toks = load_tokenizers(cfg)
    sp = toks.src.sp
    id2piece = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab_pieces = id2piece[4:]  # 0..3 are pad, unk, bos, eos: every toolkit adds its own
    for p in vocab_pieces:
        assert len(p.split()) == 1 and p == p.strip(), f"piece {p!r} would not survive whitespace splitting"

    def write(path: Path, rows) -> None:
        path.write_text("".join(" ".join(id2piece[int(i)] for i in row) + "\n" for row in rows), encoding="utf-8")

    freq: Counter = Counter()
    for split, name in (("train", "train"), ("dev", "valid")):
        s = Split.load(cfg.prepared_dir, split)
        src = [s["src"][k] for k in range(len(s))]
        tgt = [s["tgt"][k] for k in range(len(s))]
        write(pieces / f"{name}.en", src)
        write(pieces / f"{name}.de", tgt)
        if split == "train":
            for row in src + tgt:
                freq.update(int(i) for i in row)
    tests = {}
    for lang in ("en", "de"):
        lines = read_lines(data_dir / "multi30k" / f"test_2016_flickr.{lang}.gz")
        tok = toks.src if lang == "en" else toks.tgt
        ids = tok.encode_batch(lines)
        write(pieces / f"test.{lang}", ids)
        write(pieces / f"test{TINY_SENTENCES}.{lang}", ids[:TINY_SENTENCES])
        (pieces / f"test{TINY_SENTENCES}.raw.{lang}").write_text("".join(line + "\n" for line in lines[:TINY_SENTENCES]), encoding="utf-8")
        tests[lang] = len(lines)
    # Vocabularies: the same pieces for every toolkit (counts from the training pairs).
    ordered = sorted(range(4, len(id2piece)), key=lambda i: (-freq[i], i))
    (pieces / "dict.fairseq.txt").write_text("".join(f"{id2piece[i]} {max(freq[i], 1)}\n" for i in ordered), encoding="utf-8")
    (pieces / "vocab.onmt.txt").write_text("".join(f"{id2piece[i]} {max(freq[i], 1)}\n" for i in ordered), encoding="utf-8")
    (pieces / "vocab.joey.txt").write_text("".join(f"{id2piece[i]}\n" for i in ordered), encoding="utf-8")
    extra = {"vocab_pieces": len(vocab_pieces), "test_sentences": tests["en"], "unseen_in_train": sum(1 for i in ordered if not freq[i])}
    (pieces / "info.json").write_text(json.dumps(extra))
    stamp.write_text(fingerprint)
    return info | extra


# ----------------------------------------------------------------------------------------------
# log parsing: intervals of LOG_INTERVAL updates -> (last update, target tokens, seconds)


def throughput(intervals: list[tuple[int, float, float]], skip: int) -> tuple[float, float, int]:
    """Target tokens/s and tokens/update over the intervals after update ``skip``."""
    prev, tokens, secs, updates = 0, 0.0, 0.0, 0
    for step, tok, sec in intervals:
        if prev >= skip:
            tokens, secs, updates = tokens + tok, secs + sec, updates + step - prev
        prev = step
    if not updates or secs <= 0:
        raise Failure(f"no logged interval after update {skip} (intervals: {intervals})")
    return tokens / secs, tokens / updates, updates


def parse_fairseq_train(text: str) -> list[tuple[int, float, float]]:
    out, prev = [], 0
    for line in text.splitlines():
        m = re.search(r"\| train_inner \| (\{.*\})\s*$", line)
        if m:
            d = json.loads(m.group(1))
            step = int(d["num_updates"])
            tokens = float(d["wpb"]) * (step - prev)
            out.append((step, tokens, tokens / float(d["wps"])))
            prev = step
    return out


def parse_onmt_train(text: str) -> list[tuple[int, float, float]]:
    out, prev = [], 0
    pat = re.compile(r"Step (\d+)/\s*\d+;.*?bsz:\s*([\d.]+)/\s*([\d.]+)/\s*([\d.]+);\s*([\d.]+)/\s*([\d.]+) tok/s")
    for line in text.splitlines():
        m = pat.search(line)
        if m:
            step = int(m.group(1))
            tokens = float(m.group(3)) * (step - prev)  # mean target tokens per batch x batches
            out.append((step, tokens, tokens / float(m.group(6))))
            prev = step
    return out


def _joey_time(stamp: str) -> float:
    return _dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def parse_joey_train(text: str) -> list[tuple[int, float, float]]:
    """Joey logs tokens/s per interval but not the tokens: the interval's length comes from the
    log lines' timestamps (Joey's own timer restarts right after each of these lines)."""
    out, prev_t = [], None
    pat = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - joeynmt\.training - Epoch\s+\d+, Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")
    for line in text.splitlines():
        m = pat.search(line)
        if m:
            t, step, tps = _joey_time(m.group(1)), int(m.group(2)), float(m.group(3))
            if prev_t is not None:
                out.append((step, tps * (t - prev_t), t - prev_t))
            else:
                out.append((step, float("nan"), float("nan")))  # first interval: not measured anyway
            prev_t = t
    return out


def find_number(pattern: str, text: str, what: str) -> float:
    m = re.search(pattern, text)
    if not m:
        raise Failure(f"{what}: pattern {pattern!r} not found in the log")
    return float(m.group(1).replace(",", ""))


# ----------------------------------------------------------------------------------------------
# --against REF: syntaxnmt at another git revision, one more toolkit of the same round-robin

REVISION_PREFIX = "syntaxnmt@"
OUTPUT_KERNELS = "aten"  # the CPU kernels of the untimed outputs comparison, on both sides


def revision_name(sha: str) -> str:
    """The revision's name as a toolkit, in the table and the results file: ``syntaxnmt@4ddc2eb``."""
    return REVISION_PREFIX + sha[:7]


def is_revision(toolkit: str) -> bool:
    return toolkit.startswith(REVISION_PREFIX)


def label(toolkit: str) -> str:
    return NAMES.get(toolkit, toolkit)


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def resolve_revision(ref: str, repo: Path = ROOT) -> str:
    """The full sha of commit ``ref`` of ``repo``."""
    r = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if r.returncode or not r.stdout.strip():
        raise UserError(f"--against {ref}: not a commit of the repository {repo}")
    return r.stdout.strip()


def native_modules(tree: Path) -> list[str]:
    """The C extensions that ``tree``'s pyproject.toml declares (``[[tool.setuptools.ext-modules]]``:
    ``syntaxnmt._native`` up to 4ddc2eb, ``syntaxnmt.cpu._native`` after issue 48)."""
    import tomllib

    path = tree / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: {e}") from None
    return [m["name"] for m in data.get("tool", {}).get("setuptools", {}).get("ext-modules", [])]


def build_native(tree: Path, ref: str) -> list[str]:
    """Build the C extensions of the checkout ``tree`` in place (setuptools ``build_ext --inplace``,
    which reads the pyproject's ext-modules and skips what is up to date; log in
    ``<tree>.build.log`` beside it) and import each from ``tree``: the files imported."""
    modules = native_modules(tree)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")} | {"PYTHONPATH": str(tree)}
    if modules:
        log_path = tree.parent / f"{tree.name}.build.log"
        res = run_measured([sys.executable, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace"], log_path, env, tree)
        if res["rc"]:
            raise UserError(f"--against {ref}: building its native extension ({', '.join(modules)}) failed with exit code {res['rc']} (log {log_path})")
    files = []
    for name in modules:
        r = subprocess.run([sys.executable, "-c", "import importlib, sys; print(importlib.import_module(sys.argv[1]).__file__)", name],
                           cwd=tree, env=env, capture_output=True, text=True)
        path = r.stdout.strip()
        if r.returncode or not path or not Path(path).resolve().is_relative_to(tree.resolve()):
            why = (r.stderr.strip().splitlines() or ["no output"])[-1] if r.returncode else f"it is loaded from {path or '?'}"
            raise UserError(f"--against {ref}: its native extension {name} does not import from {tree}: {why}")
        files.append(path)
    return files


def materialise_revision(ref: str, work: Path, repo: Path = ROOT) -> tuple[str, Path, list[str]]:
    """Commit ``ref`` of ``repo`` in a detached git worktree ``WORK/revisions/<sha>``, made once
    (``git worktree add --detach``) and reused while it is a clean checkout of that commit, with its
    native C extensions built in place (:func:`build_native`): (sha, folder, extension files).
    Nothing else is touched: a folder there that is not such a checkout is an error (one line)."""
    sha = resolve_revision(ref, repo)
    tree = (work / "revisions" / sha).resolve()
    if tree.exists():
        top = git(tree, "rev-parse", "--show-toplevel").stdout.strip()
        at = git(tree, "rev-parse", "HEAD").stdout.strip()
        if not top or Path(top).resolve() != tree or at != sha:
            raise UserError(f"--against {ref}: {tree} exists but is not a git checkout of {sha[:12]}; move it away")
        changed = git(tree, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()
        if changed:
            raise UserError(f"--against {ref}: {tree} has local changes ({changed[0][3:]}{' ...' * (len(changed) > 1)}); revert them or move the folder away")
    else:
        tree.parent.mkdir(parents=True, exist_ok=True)
        # --force: only overrides a registration left by a worktree folder deleted by hand (git worktree prune)
        r = git(repo, "worktree", "add", "--force", "--detach", str(tree), sha)
        if r.returncode:
            raise UserError(f"--against {ref}: git worktree add {tree} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return sha, tree, build_native(tree, ref)


def against_ratios(runs: list[dict], revision: str) -> dict | None:
    """This checkout's syntaxnmt over ``revision`` (syntaxnmt at another commit): the ratios of the
    medians (``ratios``) and of each round's pair (``per_round``), when both were measured in one
    invocation (one date); ``paired`` False, without ratios, when the results file holds them from
    different invocations. None when either has no figures."""
    ours = [r for r in runs if r["toolkit"] == "syntaxnmt" and "error" not in r]
    theirs = [r for r in runs if r["toolkit"] == revision and "error" not in r]
    if not ours or not theirs:
        return None
    dates = {"syntaxnmt": sorted({str(r.get("date")) for r in ours}), revision: sorted({str(r.get("date")) for r in theirs})}
    if len(set(dates["syntaxnmt"]) | set(dates[revision])) != 1:
        return {"paired": False, "dates": dates}
    ratios = {k: statistics.median(r[k] for r in ours) / statistics.median(r[k] for r in theirs) for k, _, _ in METRICS}
    by_round = {r["repeat"]: r for r in theirs}
    per_round = [{"repeat": r["repeat"], **{k: r[k] / by_round[r["repeat"]][k] for k, _, _ in METRICS}} for r in ours if r["repeat"] in by_round]
    return {"paired": True, "date": dates[revision][0], "ratios": ratios, "per_round": per_round}


def against_line(revision: str, result: dict) -> str:
    """The summary line of :func:`against_ratios`."""
    if not result["paired"]:
        return f"syntaxnmt/{revision}: not paired (measured in different runs: {result['dates']}), no ratio"
    rat, rounds = result["ratios"], result["per_round"]

    def each(k: str) -> str:
        return ", ".join(f"x{r[k]:.3f}" for r in rounds)

    return (f"SUMMARY syntaxnmt/{revision} (this checkout over that revision, one run; speed >1 = this checkout faster; memory >1 = it uses more): "
            f"train x{rat['train_tok_s']:.3f}, decode x{rat['decode_sent_s']:.3f} (whole command x{rat['decode_sent_s_wall']:.3f}), "
            f"peak RSS train x{rat['train_peak_mb']:.3f} / decode x{rat['decode_peak_mb']:.3f}; "
            f"per round: train {each('train_tok_s')}, decode {each('decode_sent_s')}")


def compare_outputs(ours: dict, theirs: dict) -> dict:
    """This checkout's outputs (:meth:`Syntaxnmt.outputs`) against the revision's: whether the
    training losses are the same bit for bit (else from which update, and by how much) and the
    update's tokens the same, and how many decoded sentences are the same token for token."""
    la, lb = ours["train"]["losses"], theirs["train"]["losses"]
    differing = [u for u, (a, b) in enumerate(zip(la, lb), 1) if a != b]
    rel = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(la, lb)]
    ha, hb = ours["decode"]["hypotheses"], theirs["decode"]["hypotheses"]
    sentences = [i for i, (a, b) in enumerate(zip(ha, hb), 1) if a != b]
    return {
        "cpu_kernels": OUTPUT_KERNELS,
        "updates": [len(la), len(lb)],
        "losses_identical": la == lb,
        "updates_differing": len(differing) + abs(len(la) - len(lb)),
        "first_differing_update": differing[0] if differing else None,
        "max_rel_loss_diff": max(rel, default=0.0),
        "update_tokens_identical": ours["train"]["tokens"] == theirs["train"]["tokens"],
        "sentences": [len(ha), len(hb)],
        "hypotheses_identical": ha == hb,
        "sentences_identical": sum(1 for a, b in zip(ha, hb) if a == b),
        "first_differing_sentence": sentences[0] if sentences else None,
        "torch_threads": {"syntaxnmt": [ours[w]["torch_threads"] for w in ("train", "decode")], "revision": [theirs[w]["torch_threads"] for w in ("train", "decode")]},
    }


def outputs_line(revision: str, c: dict) -> str:
    """The line of :func:`compare_outputs`."""
    if c["losses_identical"]:
        losses = f"the losses of its {c['updates'][0]} training updates are identical bit for bit"
    elif c["updates"][0] != c["updates"][1]:
        losses = f"the training updates differ in number ({c['updates'][0]} against {c['updates'][1]})"
    else:
        losses = (f"the losses of {c['updates_differing']} of {c['updates'][0]} training updates differ, from update {c['first_differing_update']} "
                  f"(at most {c['max_rel_loss_diff']:.2e} relative)" + ("" if c["update_tokens_identical"] else "; the updates' tokens differ too"))
    hyps = f"{c['sentences_identical']} of {c['sentences'][1]} decoded sentences identical" + ("" if c["hypotheses_identical"] else f" (first difference: sentence {c['first_differing_sentence']})")
    return f"OUTPUTS syntaxnmt against {revision} (untimed, CPU kernels {c['cpu_kernels']} on both): {losses}; {hyps}"


# ----------------------------------------------------------------------------------------------
# the toolkits


class Toolkit:
    name = ""

    def __init__(self, work: Path, pieces: Path, env: dict, updates: int, tiny: bool):
        self.root = work / self.name
        self.root.mkdir(parents=True, exist_ok=True)
        self.pieces, self.env, self.updates, self.tiny = pieces, env, updates, tiny
        self.test = f"test{TINY_SENTENCES}" if tiny else "test"
        self.n_test = TINY_SENTENCES if tiny else sum(1 for _ in open(pieces / "test.en", encoding="utf-8"))

    def setup(self) -> None:
        """One-time, untimed preparation (binarized data, configs)."""

    def run(self, r: int) -> dict:
        raise NotImplementedError

    def check_lengths(self, hyps: list[list[str]]) -> list[int]:
        if len(hyps) != self.n_test:
            raise Failure(f"{self.name}: {len(hyps)} hypotheses for {self.n_test} test sentences")
        return sorted({len(h) for h in hyps})


class Fairseq(Toolkit):
    name = "fairseq"

    def setup(self) -> None:
        self.bin = self.root / "data-bin"
        stamp = self.bin / "DONE"
        if stamp.is_file() and stamp.read_text() == (self.pieces / "DONE").read_text():
            return
        shutil.rmtree(self.bin, ignore_errors=True)
        p = self.pieces
        cmd = [venv_bin("fairseq", "fairseq-preprocess"), "--source-lang", "en", "--target-lang", "de",
               "--trainpref", str(p / "train"), "--validpref", str(p / "valid"),
               "--testpref", f"{p / 'test'},{p / f'test{TINY_SENTENCES}'}",
               "--destdir", str(self.bin), "--joined-dictionary", "--srcdict", str(p / "dict.fairseq.txt"), "--workers", "1"]
        log("fairseq: binarizing the piece files (fairseq-preprocess)")
        run_quiet(cmd, self.root / "preprocess.log", self.env, self.root, "fairseq-preprocess")
        stamp.write_text((self.pieces / "DONE").read_text())

    def run(self, r: int) -> dict:
        run_dir = self.root / f"run{r}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        train_cmd = [
            venv_bin("fairseq", "fairseq-train"), str(self.bin), "--task", "translation", "--source-lang", "en", "--target-lang", "de",
            "--arch", "transformer", "--encoder-layers", str(LAYERS), "--decoder-layers", str(LAYERS),
            "--encoder-embed-dim", str(D_MODEL), "--decoder-embed-dim", str(D_MODEL),
            "--encoder-ffn-embed-dim", str(FFN), "--decoder-ffn-embed-dim", str(FFN),
            "--encoder-attention-heads", str(HEADS), "--decoder-attention-heads", str(HEADS),
            "--encoder-normalize-before", "--decoder-normalize-before", "--activation-fn", "relu",
            "--share-all-embeddings", "--dropout", str(DROPOUT), "--attention-dropout", "0", "--activation-dropout", str(DROPOUT),
            "--optimizer", "adam", "--adam-betas", f"({BETAS[0]}, {BETAS[1]})", "--adam-eps", "1e-9",
            "--lr", str(LR), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(WARMUP), "--clip-norm", str(CLIP_NORM),
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(LABEL_SMOOTHING),
            "--max-tokens", str(MAX_TOKENS), "--required-batch-size-multiple", "1", "--num-workers", "0",
            "--seed", str(SEED), "--max-update", str(self.updates), "--disable-validation",
            "--save-dir", str(run_dir / "checkpoints"), "--no-epoch-checkpoints",
            "--log-format", "json", "--log-interval", str(LOG_INTERVAL), "--cpu",
        ]
        tlog = run_dir / "train.log"
        res = run_measured(train_cmd, tlog, self.env, run_dir)
        check_rc(res, "fairseq-train", tlog)
        text = tlog.read_text(errors="replace")
        tok_s, tpu, n = throughput(parse_fairseq_train(text), SKIP_UPDATES)
        params = find_number(r"num\. shared model params: ([\d,]+)", text, "fairseq params")
        subset = "test1" if self.tiny else "test"  # fairseq names the second --testpref test1
        gen_cmd = [
            venv_bin("fairseq", "fairseq-generate"), str(self.bin), "--task", "translation", "--source-lang", "en", "--target-lang", "de",
            "--path", str(run_dir / "checkpoints" / "checkpoint_last.pt"), "--gen-subset", subset,
            "--beam", str(BEAM), "--batch-size", str(DECODE_BATCH), "--min-len", str(FORCE_LEN), "--max-len-a", "0", "--max-len-b", str(FORCE_LEN),
            "--lenpen", "1", "--nbest", "1", "--num-workers", "0", "--seed", str(SEED), "--cpu",
        ]
        dlog, dout = run_dir / "generate.log", run_dir / "generate.out"
        dres = run_measured(gen_cmd, dlog, self.env, run_dir, stdout_path=dout)
        check_rc(dres, "fairseq-generate", dlog)
        out = dout.read_text(errors="replace") + dlog.read_text(errors="replace")
        m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s", out)
        if not m:
            raise Failure("fairseq-generate: no 'Translated N sentences ... in Xs' line")
        n_sent, secs = int(m.group(1).replace(",", "")), float(m.group(3))
        hyps = [line.split("\t")[2].split() for line in out.splitlines() if line.startswith("H-")]
        return {
            "train_tok_s": tok_s, "tokens_per_update": tpu, "timed_updates": n, "train_peak_mb": res["peak_mb"], "train_wall_s": res["wall_s"],
            "params": int(params), "decode_sent_s": n_sent / secs, "decode_sent_s_wall": self.n_test / dres["wall_s"],
            "decode_peak_mb": dres["peak_mb"], "hyp_lengths": self.check_lengths(hyps), "sentences": n_sent,
        }


class OpenNMT(Toolkit):
    name = "onmt"

    def train_config(self, run_dir: Path) -> str:
        p = self.pieces
        # noam: lr = learning_rate * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): peak LR at WARMUP
        noam = LR / (D_MODEL**-0.5 * WARMUP**-0.5)
        return f"""# written by benchmarks/side_by_side.py
save_data: {run_dir / 'data'}
src_vocab: {p / 'vocab.onmt.txt'}
share_vocab: true
src_vocab_size: {VOCAB}
tgt_vocab_size: {VOCAB}
vocab_size_multiple: 1
data:
  corpus_1:
    path_src: {p / 'train.en'}
    path_tgt: {p / 'train.de'}
  valid:
    path_src: {p / 'valid.en'}
    path_tgt: {p / 'valid.de'}
save_model: {run_dir / 'model'}
save_checkpoint_steps: {self.updates}
train_steps: {self.updates}
valid_steps: 1000000
report_every: {LOG_INTERVAL}
seed: {SEED}
world_size: 1
gpu_ranks: []
num_workers: 0
bucket_size: {ONMT_BUCKET}
batch_type: tokens
batch_size: {MAX_TOKENS}
batch_size_multiple: 1
accum_count: [1]
normalization: tokens
max_grad_norm: {CLIP_NORM}
optim: adam
adam_beta1: {BETAS[0]}
adam_beta2: {BETAS[1]}
learning_rate: {noam:.6f}
decay_method: noam
warmup_steps: {WARMUP}
label_smoothing: {LABEL_SMOOTHING}
param_init: 0.0
param_init_glorot: true
model_dtype: fp32
encoder_type: transformer
decoder_type: transformer
enc_layers: {LAYERS}
dec_layers: {LAYERS}
hidden_size: {D_MODEL}
word_vec_size: {D_MODEL}
transformer_ff: {FFN}
heads: {HEADS}
position_encoding: true
max_relative_positions: 0
pos_ffn_activation_fn: relu
layer_norm: standard
add_qkvbias: true
add_ffnbias: true
dropout: [{DROPOUT}]
attention_dropout: [0.0]
share_embeddings: true
share_decoder_embeddings: true
"""

    def run(self, r: int) -> dict:
        run_dir = self.root / f"run{r}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        cfg = run_dir / "train.yaml"
        cfg.write_text(self.train_config(run_dir))
        tlog = run_dir / "train.log"
        res = run_measured([venv_bin("onmt", "onmt_train"), "-config", str(cfg)], tlog, self.env, run_dir)
        check_rc(res, "onmt_train", tlog)
        text = tlog.read_text(errors="replace")
        tok_s, tpu, n = throughput(parse_onmt_train(text), SKIP_UPDATES)
        params = find_number(r"\* number of parameters: (\d+)", text, "OpenNMT params")
        hyp = run_dir / "hyp.de"
        tr_cmd = [
            venv_bin("onmt", "onmt_translate"), "-model", str(run_dir / f"model_step_{self.updates}.pt"),
            "-src", str(self.pieces / f"{self.test}.en"), "-output", str(hyp),
            "-beam_size", str(BEAM), "-batch_size", str(DECODE_BATCH), "-batch_type", "sents",
            "-min_length", str(FORCE_LEN), "-max_length", str(FORCE_LEN), "-max_length_ratio", "0",
            "-seed", str(SEED), "-gpu", "-1", "-report_time",
        ]
        dlog = run_dir / "translate.log"
        dres = run_measured(tr_cmd, dlog, self.env, run_dir)
        check_rc(dres, "onmt_translate", dlog)
        secs = find_number(r"Total translation time \(s\): ([\d.]+)", dlog.read_text(errors="replace"), "onmt_translate timer")
        hyps = [line.split() for line in hyp.read_text(encoding="utf-8").splitlines()]
        return {
            "train_tok_s": tok_s, "tokens_per_update": tpu, "timed_updates": n, "train_peak_mb": res["peak_mb"], "train_wall_s": res["wall_s"],
            "params": int(params), "decode_sent_s": self.n_test / secs, "decode_sent_s_wall": self.n_test / dres["wall_s"],
            "decode_peak_mb": dres["peak_mb"], "hyp_lengths": self.check_lengths(hyps), "sentences": self.n_test,
        }


class Joey(Toolkit):
    name = "joey"

    def config(self, run_dir: Path, load_model: str | None) -> str:
        p = self.pieces
        side = lambda lang: f"""    lang: {lang}
    level: word
    lowercase: false
    normalize: false
    max_length: -1
    min_length: -1
    voc_file: {p / 'vocab.joey.txt'}"""  # noqa: E731
        enc_dec = lambda kind: f"""  {kind}:
    type: transformer
    num_layers: {LAYERS}
    num_heads: {HEADS}
    embeddings:
      embedding_dim: {D_MODEL}
      scale: true
    hidden_size: {D_MODEL}
    ff_size: {FFN}
    dropout: {DROPOUT}
    layer_norm: pre
    activation: relu"""  # noqa: E731
        load = f"\n  load_model: {load_model}" if load_model else ""
        return f"""# written by benchmarks/side_by_side.py
name: side-by-side-joey
joeynmt_version: 2.3.0
model_dir: {run_dir / 'model'}
use_cuda: false
fp16: false
random_seed: {SEED}
data:
  train: {p / 'train'}
  dev: {p / 'valid'}
  dataset_type: plain
  src:
{side('en')}
  trg:
{side('de')}
testing:{load}
  n_best: 1
  beam_size: {BEAM}
  beam_alpha: 1.0
  batch_size: {DECODE_BATCH}
  batch_type: sentence
  max_output_length: {FORCE_LEN}
  min_output_length: {FORCE_LEN}
  eval_metrics: [bleu]
  return_prob: none
training:
  random_seed: {SEED}
  optimizer: adam
  adam_betas: [{BETAS[0]}, {BETAS[1]}]
  scheduling: warmupinversesquareroot
  learning_rate: {LR}
  learning_rate_warmup: {WARMUP}
  learning_rate_min: 1.0e-12
  label_smoothing: {LABEL_SMOOTHING}
  loss: crossentropy
  batch_size: {JOEY_BATCH}
  batch_type: token
  batch_multiplier: 1
  normalization: tokens
  clip_grad_norm: {CLIP_NORM}
  weight_decay: 0.0
  epochs: 100
  updates: {self.updates}
  validation_freq: 1000000
  logging_freq: {LOG_INTERVAL}
  early_stopping_metric: loss
  keep_best_ckpts: 1
  overwrite: true
  shuffle: true
  print_valid_sents: []
  num_workers: 0
model:
  initializer: xavier_uniform
  bias_initializer: zeros
  init_gain: 1.0
  embed_initializer: xavier_uniform
  embed_init_gain: 1.0
  tied_embeddings: true
  tied_softmax: true
{enc_dec('encoder')}
{enc_dec('decoder')}
"""

    def run(self, r: int) -> dict:
        run_dir = self.root / f"run{r}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        cfg = run_dir / "train.yaml"
        cfg.write_text(self.config(run_dir, None))
        py = venv_bin("joey", "python")
        tlog = run_dir / "train.log"
        res = run_measured([py, "-m", "joeynmt", "train", str(cfg), "--skip-test"], tlog, self.env, run_dir)
        check_rc(res, "joeynmt train", tlog)
        text = tlog.read_text(errors="replace")
        tok_s, tpu, n = throughput(parse_joey_train(text), SKIP_UPDATES)
        params = find_number(r"Total params: (\d+)", text, "Joey params")
        tcfg = run_dir / "translate.yaml"
        tcfg.write_text(self.config(run_dir, str(run_dir / "model" / f"{self.updates}.ckpt")))
        dlog, dout = run_dir / "translate.log", run_dir / "hyp.de"
        # `translate -o` crashes in 2.3.0: the hypotheses are read from stdout.
        dres = run_measured([py, "-m", "joeynmt", "translate", str(tcfg)], dlog, self.env, run_dir, stdout_path=dout, stdin_path=self.pieces / f"{self.test}.en")
        check_rc(dres, "joeynmt translate", dlog)
        secs = find_number(r"Generation took ([\d.]+)\[sec\]", dlog.read_text(errors="replace"), "Joey timer")
        hyps = [line.split() for line in dout.read_text(encoding="utf-8").splitlines()]
        return {
            "train_tok_s": tok_s, "tokens_per_update": tpu, "timed_updates": n, "train_peak_mb": res["peak_mb"], "train_wall_s": res["wall_s"],
            "params": int(params), "decode_sent_s": self.n_test / secs, "decode_sent_s_wall": self.n_test / dres["wall_s"],
            "decode_peak_mb": dres["peak_mb"], "hyp_lengths": self.check_lengths(hyps), "sentences": self.n_test,
        }


class Syntaxnmt(Toolkit):
    name = "syntaxnmt"
    tree = ROOT  # the checkout whose syntaxnmt and benchmarks/peers/run_syntaxnmt.py run

    def __init__(self, work: Path, pieces: Path, env: dict, updates: int, tiny: bool, own_cache: bool = False):
        super().__init__(work, pieces, env, updates, tiny)
        self.config = work / "syntaxnmt.yaml"  # written by prepare_data
        self.own_cache = own_cache  # --against: a calibration cache of its own (SYNTAXNMT_CACHE_DIR) under WORK/<name>
        self.test_src = self.pieces / f"test{TINY_SENTENCES}.raw.en" if tiny else Path(os.environ["SYNTAXNMT_DATA"]) / "multi30k" / "test_2016_flickr.en.gz"

    def process_env(self) -> dict:
        env = {**self.env, "PYTHONPATH": str(self.tree)}  # this tree's syntaxnmt
        if self.own_cache:
            env["SYNTAXNMT_CACHE_DIR"] = str(self.root / "kernel-cache")
        return env

    def run(self, r: int) -> dict:
        run_dir = self.root / f"run{r}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        script = str(self.tree / "benchmarks" / "peers" / "run_syntaxnmt.py")
        cfg = str(self.config)
        tlog = run_dir / "train.log"
        cmd = [sys.executable, script, "train", "--config", cfg, "--updates", str(self.updates - SKIP_UPDATES), "--warmup", str(SKIP_UPDATES)]
        env = self.process_env()
        res = run_measured(cmd, tlog, env, self.tree)
        check_rc(res, f"{self.name} training", tlog)
        t = _result_line(tlog)
        dlog = run_dir / "decode.log"
        cmd = [sys.executable, script, "decode", "--config", cfg, "--test-src", str(self.test_src), "--beam", str(BEAM), "--force-length", str(FORCE_LEN)]
        dres = run_measured(cmd, dlog, env, self.tree)
        check_rc(dres, f"{self.name} decoding", dlog)
        d = _result_line(dlog)
        clog = run_dir / "check.log"
        cmd[2] = "check"
        run_quiet(cmd, clog, env, self.tree, f"{self.name} length check")
        d.update(_result_line(clog))
        if d["sentences"] != self.n_test:
            raise Failure(f"{self.name} decoded {d['sentences']} sentences, expected {self.n_test}")
        return {
            "train_tok_s": t["train_tok_s"], "tokens_per_update": t["tokens_per_update"], "timed_updates": t["timed_updates"],
            "train_peak_mb": res["peak_mb"], "train_wall_s": res["wall_s"], "params": t["params"],
            "decode_sent_s": d["decode_sent_s_own_timer"], "decode_sent_s_wall": self.n_test / dres["wall_s"],
            "decode_peak_mb": dres["peak_mb"], "hyp_lengths": d["hyp_lengths_checked"], "sentences": d["sentences"],
            "torch_threads": d["torch_threads"], "threads": d.get("threads"), "omp_wait_policy": d.get("omp_wait_policy"), "gomp_spincount": d.get("gomp_spincount"),
            "torch_cpu_capability": d.get("torch_cpu_capability"),  # the measured processes' own (AVX2 with --isa avx2)
            "cpu_kernels": {"train": kernel_choice(t), "decode": kernel_choice(d)},  # the calibration's choice: memory as well as speed depend on it
        }

    def outputs(self) -> dict:
        """Untimed, once (``--against``): the loss of each of the ``updates`` training updates and
        the decoded token ids of the test sentences, by this checkout's
        ``benchmarks/peers/syntaxnmt_outputs.py`` run on this tree's syntaxnmt, with the CPU kernels
        fixed to :data:`OUTPUT_KERNELS` on both sides (a calibration choosing differently for the
        two would change the floating-point sums, not the code's behaviour)."""
        out = self.root / "outputs"
        out.mkdir(parents=True, exist_ok=True)
        env = self.process_env() | {"SYNTAXNMT_CPU_KERNELS": OUTPUT_KERNELS}
        script = str(PEERS_DIR / "syntaxnmt_outputs.py")
        found: dict = {}
        for what, extra in (("train", ["--updates", str(self.updates)]),
                            ("decode", ["--test-src", str(self.test_src), "--beam", str(BEAM), "--force-length", str(FORCE_LEN)])):
            path = out / f"{what}.json"
            path.unlink(missing_ok=True)
            run_quiet([sys.executable, script, what, "--config", str(self.config), "--out", str(path), *extra], out / f"{what}.log", env, self.tree, f"{self.name} outputs ({what})")
            found[what] = json.loads(path.read_text())
        return found


class SyntaxnmtRevision(Syntaxnmt):
    """syntaxnmt at another git revision (``--against REF``): its own worktree ``tree``
    (:func:`materialise_revision`), its own ``benchmarks/peers/run_syntaxnmt.py``, the same prepared
    data and setting with its own run folder and calibration cache (``WORK/syntaxnmt@<sha>``)."""

    def __init__(self, work: Path, pieces: Path, env: dict, updates: int, tiny: bool, *, sha: str, tree: Path, data_dir: Path):
        self.name, self.tree, self.sha = revision_name(sha), tree, sha
        super().__init__(work, pieces, env, updates, tiny, own_cache=True)
        self.config = self.root / "syntaxnmt.yaml"
        self.config_text = syntaxnmt_config(work, data_dir, work_dir=self.root / "run")

    def setup(self) -> None:
        if not self.config.is_file() or self.config.read_text() != self.config_text:
            self.config.write_text(self.config_text)


def kernel_choice(result: dict) -> str | None:
    """The CPU kernels a syntaxnmt process ran (``onednn, row packing``, ``aten``...), from its result line."""
    return (result.get("cpu_kernels") or {}).get("choice")


def kernel_line(runs: list[dict], toolkit: str = "syntaxnmt") -> str | None:
    """syntaxnmt's CPU kernels over its rounds, training and decoding; it says so when the rounds
    differ in the training's: oneDNN keeps state per product shape (``syntaxnmt/cpu/linear.py``),
    so on the side-by-side model a round on oneDNN peaks some 500 MB (about 40 %) above one on
    OpenBLAS or ATen (docs/benchmarks.md, issue 48), and medians over such rounds mix the two.
    ``toolkit``: ``syntaxnmt`` or a revision of it (``syntaxnmt@4ddc2eb``)."""
    ours = [r.get("cpu_kernels") for r in runs if r["toolkit"] == toolkit and "error" not in r and r.get("cpu_kernels")]
    if not ours:
        return None
    parts = []
    for what in ("train", "decode"):
        counts = Counter(k[what] or "unknown" for k in ours)
        parts.append(f"{what} " + ", ".join(f"{name} in {n} round{'s' * (n > 1)}" for name, n in counts.items()))
    mixed = len({k["train"] for k in ours}) > 1
    return f"{toolkit}'s CPU kernels (the calibration's choice): " + "; ".join(parts) + (" -- the training rounds differ: their peak memory is not comparable" if mixed else "")


def _result_line(path: Path) -> dict:
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise Failure(f"{path}: no RESULT line")


CLASSES = {"fairseq": Fairseq, "onmt": OpenNMT, "joey": Joey, "syntaxnmt": Syntaxnmt}


# ----------------------------------------------------------------------------------------------
# results file: one JSON holding every toolkit's latest figures


def read_previous(json_path: Path, setting: dict) -> dict | None:
    """The results file of an earlier run, if it exists and was measured with the same setting
    (same model, batches, updates, --tiny or not); None otherwise (it is then replaced whole)."""
    try:
        previous = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return None
    if {"isa": "native", **(previous.get("setting") or {})} != {"isa": "native", **setting}:  # files written before --isa: native
        log(f"{json_path}: measured with another setting; it is replaced, not merged")
        return None
    return previous


def merge_runs(previous: dict | None, runs: list[dict], errors: dict, this_run: dict) -> tuple[list[dict], dict, list[dict]]:
    """The runs and errors of ``previous`` for the toolkits this run did not measure, plus this
    run's; and the list of invocations whose figures the file holds (``this_run``: command, date,
    toolkits, machine). A toolkit measured again replaces its earlier figures entirely."""
    measured = set(this_run["toolkits"])
    if previous is None:
        return runs, errors, [this_run]
    kept = [r for r in previous.get("runs", []) if r["toolkit"] not in measured]
    kept_errors = {t: e for t, e in previous.get("errors", {}).items() if t not in measured}
    old_invocations = previous.get("invocations") or [{k: previous.get(k) for k in ("command", "date", "toolkits", "machine")}]
    for r in kept:  # files written before runs carried their date
        r.setdefault("date", previous.get("date"))
    dates = {r["date"] for r in kept}
    invocations = [i for i in old_invocations if i.get("date") in dates or set(i.get("toolkits") or ()) & set(kept_errors)]
    return kept + runs, kept_errors | errors, invocations + [this_run]


# ----------------------------------------------------------------------------------------------
# report


def fmt(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if key in ("train_tok_s", "train_peak_mb", "decode_peak_mb") else f"{v:.1f}"


def summarize(runs: list[dict], toolkits: list[str]) -> tuple[dict, dict, list[str]]:
    """Medians per toolkit, the ratios syntaxnmt/peer and the table's lines (with a revision of
    syntaxnmt among ``toolkits``, ``--against``: its row and :func:`against_line`)."""
    medians: dict = {}
    for t in toolkits:
        ok = [r for r in runs if r["toolkit"] == t and "error" not in r]
        if not ok:
            continue
        medians[t] = {k: statistics.median(r[k] for r in ok) for k, _, _ in METRICS}
        medians[t]["tokens_per_update"] = statistics.median(r["tokens_per_update"] for r in ok)
        medians[t]["params"] = ok[0]["params"]
        medians[t]["runs"] = len(ok)
    ratios: dict = {}
    if "syntaxnmt" in medians:
        for t in toolkits:
            if t in PEERS and t in medians:
                ratios[t] = {k: medians["syntaxnmt"][k] / medians[t][k] for k, _, _ in METRICS}
    against = {t: a for t in toolkits if is_revision(t) and (a := against_ratios(runs, t))}
    rows = {"syntaxnmt/" + t: rat for t, rat in ratios.items()} | {"syntaxnmt/" + t: a["ratios"] for t, a in against.items() if a["paired"]}
    width = max([18] + [len(name) + 1 for name in [*map(label, toolkits), *rows]])
    lines = []
    head = f"{'toolkit':<{width}}" + "".join(f"{lab:>17}" for _, lab, _ in METRICS) + f"{'tok/update':>12}{'params':>11}{'runs':>6}"
    lines.append(head)
    for t in toolkits:
        if t in medians:
            m = medians[t]
            lines.append(f"{label(t):<{width}}" + "".join(f"{fmt(k, m[k]):>17}" for k, _, _ in METRICS) + f"{m['tokens_per_update']:>12.0f}{m['params']:>11,}{m['runs']:>6}")
        else:
            lines.append(f"{label(t):<{width}}  FAILED (see the errors above)")
    for name, rat in rows.items():
        lines.append(f"{name:<{width}}" + "".join(f"{'x%.2f' % rat[k]:>17}" for k, _, _ in METRICS))
    if ratios:
        parts = []
        for t, rat in ratios.items():
            parts.append(
                f"{NAMES[t]}: train x{rat['train_tok_s']:.2f}, decode x{rat['decode_sent_s']:.2f} "
                f"(whole command x{rat['decode_sent_s_wall']:.2f}), peak RSS train x{rat['train_peak_mb']:.2f} / decode x{rat['decode_peak_mb']:.2f}"
            )
        lines.append("SUMMARY syntaxnmt/peer (speed >1 = syntaxnmt faster; memory >1 = syntaxnmt uses more): " + "; ".join(parts))
    lines.extend(against_line(t, a) for t, a in against.items())
    for t in ["syntaxnmt", *(t for t in toolkits if is_revision(t))]:
        kernels = kernel_line(runs, t)
        if kernels:
            lines.append(kernels)
    return medians, ratios, lines


def round_order(measured: list[str], r: int) -> list[str]:
    """The toolkits in round ``r``: in the order given, but in even rounds syntaxnmt and its
    revision (``--against``; right after it) swap places, so that neither always runs first."""
    order = list(measured)
    revs = [i for i, t in enumerate(order) if is_revision(t)]
    if r % 2 == 0 and revs and "syntaxnmt" in order:
        i, j = order.index("syntaxnmt"), revs[0]
        order[i], order[j] = order[j], order[i]
    return order


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=100, help="training updates per run; updates 11..N are measured (multiple of 10)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over the toolkits; medians are reported")
    ap.add_argument("--toolkits", default=",".join(TOOLKITS), help="comma-separated subset of " + ",".join(TOOLKITS))
    ap.add_argument("--tiny", action="store_true", help=f"quick end-to-end check: 20 updates, {TINY_SENTENCES} test sentences, 1 round")
    ap.add_argument("--threads", type=int, default=0, help="OMP/MKL threads for every toolkit (0: torch's default)")
    ap.add_argument("--no-install", action="store_true", help="do not run benchmarks/peers/install.sh for the selected peers")
    ap.add_argument("--work", default=str(OUT / "side_by_side"), help="prepared data, configs and logs")
    ap.add_argument("--json", help="results file (default benchmarks/out/side_by_side.json, -tiny with --tiny, -avx2 with --isa avx2)")
    ap.add_argument("--against", metavar="REF", help="also measure syntaxnmt at git revision REF (a worktree under WORK/revisions), as toolkit syntaxnmt@<sha>, "
                    "in the same rounds; ratios of this checkout's syntaxnmt to it, and its training losses and decoded outputs compared")
    _isa.add_isa_argument(ap)
    args = ap.parse_args()
    stop_on_sigterm()
    toolkits = [t.strip() for t in args.toolkits.split(",") if t.strip()]
    bad = [t for t in toolkits if t not in TOOLKITS]
    if bad or not toolkits:
        ap.error(f"unknown toolkit(s) {bad}; choose from {','.join(TOOLKITS)}")
    if args.against is not None and "syntaxnmt" not in toolkits:
        ap.error("--against compares with this checkout's syntaxnmt: add syntaxnmt to --toolkits")
    if args.tiny:
        args.updates, args.repeats = 20, 1
    if args.updates < SKIP_UPDATES + LOG_INTERVAL or args.updates % LOG_INTERVAL:
        ap.error(f"--updates must be a multiple of {LOG_INTERVAL} and at least {SKIP_UPDATES + LOG_INTERVAL}")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    json_path = Path(args.json) if args.json else OUT / ("side_by_side" + ("-tiny" if args.tiny else "") + ("" if args.isa == "native" else f"-{args.isa}") + ".json")
    data_dir = Path(os.environ.get("SYNTAXNMT_DATA", ROOT.parent / "shared" / "data"))
    if not data_dir.is_absolute():
        data_dir = (Path.cwd() / data_dir).resolve()
    os.environ["SYNTAXNMT_DATA"] = str(data_dir)  # absolute, for every process started below
    env = clean_env(args.threads, args.isa)
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    t_start = time.perf_counter()
    machine = machine_info()
    revision = None
    if args.against is not None:
        sha, tree, native = materialise_revision(args.against, work)
        revision = {"ref": args.against, "sha": sha, "name": revision_name(sha), "tree": str(tree), "native": native}
        log(f"--against {args.against}: {revision['name']} from {tree} (native extension {', '.join(native) or 'none'})")

    peers = [t for t in toolkits if t in PEERS]
    if peers and not args.no_install:
        log(f"installing/checking {', '.join(peers)} (benchmarks/peers/install.sh; skips what is done)")
        r = subprocess.run(["bash", str(PEERS_DIR / "install.sh"), *peers], cwd=ROOT)
        if r.returncode != 0:
            log("install.sh failed for at least one peer: the failing ones are reported below")
    log(f"preparing the shared data in {work / 'data'}")
    data = prepare_data(work, data_dir)
    pieces = Path(data["pieces"])

    kits: dict[str, Toolkit] = {}
    errors: dict[str, str] = {}
    for t in toolkits:
        try:
            if t in PEERS and not (VENVS / t / ".stamp").is_file():
                raise Failure(f"{t}: no installed environment in {VENVS / t} (run benchmarks/peers/install.sh {t})")
            kits[t] = Syntaxnmt(work, pieces, env, args.updates, args.tiny, own_cache=True) if t == "syntaxnmt" and revision else CLASSES[t](work, pieces, env, args.updates, args.tiny)
            kits[t].setup()
        except Failure as e:
            errors[t] = str(e)
            log(f"{t}: {e}")
    measured = list(toolkits)
    if revision:
        name = revision["name"]
        kits[name] = SyntaxnmtRevision(work, pieces, env, args.updates, args.tiny, sha=revision["sha"], tree=Path(revision["tree"]), data_dir=data_dir)
        kits[name].setup()
        measured.insert(measured.index("syntaxnmt") + 1, name)

    runs: list[dict] = []
    for r in range(1, args.repeats + 1):
        for t in round_order(measured, r):
            if t not in kits or t in errors:
                continue
            log(f"round {r}/{args.repeats}: {label(t)}")
            t0, load_before = time.perf_counter(), os.getloadavg()[0]
            try:
                res = kits[t].run(r)
                if res["hyp_lengths"] != [FORCE_LEN]:
                    raise Failure(f"{t}: hypothesis lengths {res['hyp_lengths']}, expected all {FORCE_LEN}")
            except Failure as e:
                errors[t] = str(e)
                log(f"{t}: {e}")
                runs.append({"toolkit": t, "repeat": r, "error": str(e)})
                continue
            res.update(toolkit=t, repeat=r, seconds=time.perf_counter() - t0, load_1min_before=load_before, load_1min_after=os.getloadavg()[0])
            runs.append(res)
            log(
                f"  {label(t)}: train {res['train_tok_s']:.0f} tgt tok/s ({res['tokens_per_update']:.0f} tok/update), "
                f"decode {res['decode_sent_s']:.1f} sent/s (whole command {res['decode_sent_s_wall']:.1f}), "
                f"peak RSS {res['train_peak_mb']:.0f}/{res['decode_peak_mb']:.0f} MB, {res['params']:,} params, {res['seconds']:.0f} s"
                + (f", CPU kernels train {res['cpu_kernels']['train']} / decode {res['cpu_kernels']['decode']}" if "cpu_kernels" in res else "")
            )

    outputs = None
    if revision and not {"syntaxnmt", revision["name"]} & set(errors):
        try:
            log(f"outputs (untimed, CPU kernels {OUTPUT_KERNELS}): the losses of {args.updates} updates and the decoded sentences of syntaxnmt and {revision['name']}")
            outputs = compare_outputs(kits["syntaxnmt"].outputs(), kits[revision["name"]].outputs())
        except Failure as e:
            outputs = {"error": str(e)}
            log(f"outputs: {e}")

    # The thread variables and instruction-set limits every toolkit's process started with (not this one's).
    machine = with_load_after(machine) | {"threads": args.threads or "each toolkit's default", "env": {k: env.get(k) for k in THREAD_VARIABLES}, "isa_option": args.isa,
                                         "isa_limits": isa_limits(env), "isa_note": describe_isa_limits(isa_limits(env)) or None}
    this_run = {"command": command, "date": _dt.datetime.now().isoformat(timespec="seconds"), "toolkits": measured, "machine": machine}
    for res in runs:
        res["date"] = this_run["date"]
    setting = {"tiny": args.tiny, "updates": args.updates, "seed": SEED, "vocab": VOCAB, "layers": LAYERS, "d_model": D_MODEL, "heads": HEADS,
               "ffn": FFN, "dropout": DROPOUT, "lr": LR, "warmup": WARMUP, "betas": list(BETAS), "label_smoothing": LABEL_SMOOTHING,
               "clip_norm": CLIP_NORM, "max_tokens": MAX_TOKENS, "joey_batch_tokens": JOEY_BATCH, "beam": BEAM, "forced_length": FORCE_LEN,
               "decode_batch": DECODE_BATCH, "log_interval": LOG_INTERVAL, "isa": args.isa}
    previous = read_previous(json_path, setting)
    failed_now = bool(errors) or bool(outputs and "error" in outputs)
    runs, errors, invocations = merge_runs(previous, runs, errors, this_run)
    present = {r["toolkit"] for r in runs} | set(errors)
    merged = [t for t in TOOLKITS if t in present] + sorted(t for t in present if is_revision(t))
    medians, ratios, lines = summarize(runs, merged)
    print(f"side by side: {args.updates} updates (11..{args.updates} measured), beam {BEAM} forced to {FORCE_LEN} pieces on "
          f"{TINY_SENTENCES if args.tiny else data['test_sentences']} sentences, medians of {args.repeats} round(s)")
    for line in lines:
        print(line)
    if outputs:
        print(f"ERROR outputs: {outputs['error'].splitlines()[0]}" if "error" in outputs else outputs_line(revision["name"], outputs))
    print(machine_summary(machine))
    for t in merged:
        if t not in measured:
            dates = sorted({r.get("date", "?") for r in runs if r["toolkit"] == t})
            print(f"{label(t)}: figures kept from the earlier run(s) of {', '.join(dates)} in {json_path.name}")
    for t, e in errors.items():
        print(f"ERROR {t}: {e.splitlines()[0]}")
    result = {
        "command": command,
        "date": this_run["date"],
        "tiny": args.tiny,
        "updates": args.updates,
        "measured_updates": f"{SKIP_UPDATES + 1}..{args.updates}",
        "repeats": args.repeats,
        "toolkits": merged,
        "machine": this_run["machine"],
        "setting": setting,
        "invocations": invocations,
        "data": data,
        "runs": runs,
        "medians": medians,
        "ratios_syntaxnmt_over_peer": ratios,
        "against": revision and revision | {"ratios_syntaxnmt_over_revision": against_ratios(runs, revision["name"]), "outputs": outputs},
        "table": lines,
        "errors": errors,
        "total_seconds": time.perf_counter() - t_start,
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json_path, json.dumps(result, indent=1))
    print(f"results: {json_path} (total {result['total_seconds']:.0f} s; toolkits in the file: {', '.join(merged)})")
    return 1 if failed_now else 0


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(lambda: sys.exit(main()))  # a user mistake: one line, exit 2
