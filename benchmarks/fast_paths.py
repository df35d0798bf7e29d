"""What each CPU fast path saves on syntaxnmt's side of the side-by-side benchmark (issue 48, item 3).

    python benchmarks/fast_paths.py [--paths all|NAME,NAME] [--rounds 2] [--updates 100] [--threads 2]
        [--sentences 0] [--cpu-kernels auto] [--work benchmarks/out/side_by_side] [--out benchmarks/out/fast_paths.json]
    python benchmarks/fast_paths.py --list     # the paths, their code and line counts; nothing measured

The commands are syntaxnmt's of ``benchmarks/side_by_side.py`` (``--toolkits syntaxnmt --updates 100
--threads 2``), run the same way: the data ``side_by_side.prepare_data`` prepares (Multi30k en-de,
its common model and settings), each command in its own process (``side_by_side.run_measured``:
wall clock and peak RSS), the measuring functions of ``benchmarks/speed.py`` through
``benchmarks/peers/run_syntaxnmt.py`` -- training: target tokens/s of ``--updates`` - 10 updates
after 10 untimed ones (fewer with ``--updates`` under 20); decoding: beam 5 forced to 20 pieces,
batches of 64, sentences/s by the search's own timer (and by the whole command's wall clock, kept
in the JSON) over the 1,000 sentences of test_2016_flickr (``--sentences N``: the first N).
Threads: ``--threads`` sets OMP_NUM_THREADS/MKL_NUM_THREADS as in side_by_side.py.

Each process goes through ``benchmarks/fast_path_run.py``, which runs run_syntaxnmt.py with one
path removed by a patch of that process (``benchmarks/fast_path_variants.py``: what each variant
removes and what runs instead is described there; the package keeps no switch) and counts the
calls into every path. The check is built in: a process with the path must have called it (if
the first one did not, the path is not in that command on this machine -- the calibration chose
ATen, row packing off, one thread ... -- and its remaining runs are skipped, reported as "not
used"), and a process without it must not have (else the measurement stops for that path with an
error: it would measure nothing).

The paths (``--paths``; default all), what a process runs without each (in detail:
``fast_path_variants.py``), and its code (``--list`` prints every part with its line range; the
counts, computed from the source by AST extent or between two markers of ``_native.c``, go to
the table and the JSON):

- ``train_attention`` (train, decode): the C attention of whole sequences -> PyTorch's
  ``scaled_dot_product_attention`` (the model's default kernel) on the three projections; the
  packed-through stacks need it and go too. Code: ``cpu/attention.py`` ``usable`` ..
  ``rows_attention``, ``CpuAttention.attend``; ``_native.c`` "Attention of training and scoring".
- ``decode_step`` (decode): ``native_step`` -> plain key/value caches and ``CpuAttention``'s
  explicit one-query products. Code: ``cpu/attention.py`` ``_CrossState``, ``_SelfState``,
  ``native_step``; ``_native.c`` "Single-query attention of incremental decoding".
- ``packing`` (train): row packing and the packed-through stacks -> the model's loop over the
  layers on every row (as ``train.row_packing: off``; the fused residual-norm chain goes with it).
  Code: ``cpu/packing.py``; ``cpu/stack.py`` ``pre_norm_chain``, ``embedded_rows``, ``_run``,
  ``PackedStacks``, ``_states_like``.
- ``fused_dropout`` (train): the fused dropout/norm kernels -> ``nn.Dropout``, ``FeedForward``,
  ``Residual`` as built, and ``x + F.dropout(y)`` then the norm. Code: ``cpu/dropout.py``;
  ``cpu/stack.py`` ``FusedFeedForward``, ``FusedResidual``; ``_native.c`` "Dropout of training"
  (add_norm included).
- ``routing`` (train, decode): oneDNN/OpenBLAS products -> ATen's (the calibration's candidates
  mapped to ATen, row packing still calibrated). Code: ``cpu/linear.py`` ``configure`` ..
  ``Linear``; ``cpu/blas.py`` with the OpenBLAS helpers (``calibration.py`` not
  counted).
- ``native_loss`` (train): the C loss -> the torch branch of ``training/losses.py``. Code:
  ``cpu/loss.py``; ``_native.c`` "The label-smoothed cross-entropy".
- ``forked_processes`` (decode): off in the command as it is (``decode.processes`` false): the
  variant turns it on. Code: ``cpu/pools.py`` ``_forked_call``, ``_forked_start``,
  ``_forked_pool``, ``_result``.
- ``compile`` (train): torch.compile (inductor, mode default) of the model with the fused
  dropout/norm kernels removed, the maintained alternative to them; its compilation (a prepass of
  one forward/backward on every batch of the measured updates, before them, so that no shape is
  compiled in the timed updates -- the late graphs are counted and printed; an empty inductor
  cache of its own in every round: compiled cold) is reported apart, and the steady state is the
  usual measurement after it. Both sides run ATen's products (inductor cannot
  lower the routed oneDNN op with trainable weights): compile is compared with ``routing``'s
  process (the fused kernels, ATen products), not with all paths.

Paired design: for each (path, command), ``--rounds`` rounds of two processes, with the path and
without it, in the order with/without in odd rounds and without/with in even ones (ABBA over two
rounds); the pairs' order rotates from round to round. Before them, round 0 runs each command
once with all paths, its CPU kernels calibrated as the command calibrates them (``auto``; the
times cached under the work folder, ``SYNTAXNMT_CACHE_DIR``); every later process, with or without
its path, runs with that choice (``fast_path_variants.fix_choice``: the calibration's one
candidate, no timing), so that a removal changes nothing else -- ``routing`` maps it to ATen with
the same packing, ``packing`` to the same kernels without packing. Round 0 counts in the spread of
the processes with all paths only. ``--calibrate-each``: every process calibrates for itself
instead (its variant's own cache): what a deletion would cost once the calibration chooses again
(noisier: a calibration's choice among close candidates varies). ``--cpu-kernels
onednn|aten|openblas`` fixes the kernel mode of every process (round 0 then times nothing).

Reported per path and command: the median metric with the path and without it over the rounds,
the **saving** = median with / median without - 1, in % (how much longer the command takes
without the path, relative to the command as it is -- also from the whole process's wall clock,
start-up included, in the JSON: ``wall_saving_pct``; for ``compile``: the hand-fused kernels
against compile, so positive means the fused kernels are faster), the paired saving of each
round, and a suggested verdict: kept if the path saves at least 3 % of a command it runs in,
else deleted; the spread of all the processes with every path gives the noise to read it against.
A markdown table (path, lines, train saving, decode saving, verdict) is printed; everything goes
to ``--out`` (JSON, rewritten atomically after every process, so an interrupted run keeps what it
measured). Logs of every process: ``<work>/fast_paths/logs``.
"""

from __future__ import annotations

import sys

import _isa  # noqa: F401  (side_by_side imports it first too)

# isort: split
import argparse
import datetime as _dt
import json
import os
import shlex
import shutil
import statistics
import time
from pathlib import Path

import fast_path_variants as fpv
import side_by_side as sbs
from tqdm import tqdm

from syntaxnmt.cpu.machine import THREAD_VARIABLES, machine_info, machine_summary, with_load_after
from syntaxnmt.textio import atomic_write_text, read_lines

ROOT = sbs.ROOT
RUNNER = Path(__file__).resolve().parent / "fast_path_run.py"
THRESHOLD = 3.0
"""A path saving less than this % of every command it runs in is deleted (issue 48, item 3)."""
METRIC = {"train": "train_tok_s", "decode": "decode_sent_s_own_timer"}
UNITS = {"train": "tgt tok/s", "decode": "sent/s"}
CALIBRATION = "(calibration)"  # the path name of round 0's processes


def log(msg: str) -> None:
    tqdm.write(f"[fast-paths] {msg}", file=sys.stderr)


def warmup_updates(updates: int) -> int:
    """The untimed updates before the timed ones: side_by_side's 10, fewer for a short check."""
    return min(sbs.SKIP_UPDATES, max(1, updates // 2))


def command(what: str, variant: str, cfg: Path, updates: int, test_src: Path, choice: str | None = None) -> list[str]:
    """The process measuring ``what`` (train, decode) without ``variant``'s path (none: all paths),
    with the CPU kernel ``choice`` (None: calibrated)."""
    cmd = [sys.executable, str(RUNNER), variant, *(["--choice", choice] if choice else []), what, "--config", str(cfg)]
    if what == "train":
        warmup = warmup_updates(updates)
        return cmd + ["--updates", str(updates - warmup), "--warmup", str(warmup)]
    return cmd + ["--test-src", str(test_src), "--beam", str(sbs.BEAM), "--force-length", str(sbs.FORCE_LEN)]


def paths_line(path: Path) -> dict:
    """The ``PATHS {json}`` line of a process's log (fast_path_variants.child_main)."""
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith("PATHS "):
            return json.loads(line[len("PATHS ") :])
    raise sbs.Failure(f"{path}: no PATHS line")


def schedule(pairs: list[tuple[str, str]], rounds: int) -> list[tuple[int, str, str, str]]:
    """``(round, path, command, role)`` in the order they run: every pair once a round, the pairs
    rotated by one each round, the path's process first (role ``with``) in odd rounds and second
    in even ones."""
    out = []
    for r in range(1, rounds + 1):
        shift = (r - 1) % len(pairs) if pairs else 0
        for name, what in pairs[shift:] + pairs[:shift]:
            roles = ("with", "without") if r % 2 else ("without", "with")
            out.extend((r, name, what, role) for role in roles)
    return out


def process_variant(name: str, role: str) -> str:
    """The variant a process of ``role`` runs: the path's baseline (``none``: all paths) or its
    removal (its addition, for a path the command lacks)."""
    variant = fpv.VARIANTS[name]
    on = role == "with"
    return name if on == variant.adds else variant.baseline


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}"


def kernels_of(run: dict) -> str:
    """The CPU kernel choice of a measured process (its calibration's, :mod:`syntaxnmt.cpu.calibration`)."""
    return str(((run.get("result") or {}).get("cpu_kernels") or {}).get("choice"))


def summarize(runs: list[dict], pairs: list[tuple[str, str]], unused: dict, errors: dict) -> dict:
    """Per path and command: medians with and without, the saving (%), the rounds' paired savings,
    and the state (measured, not used, error, not measured)."""
    out: dict = {}
    for name, what in pairs:
        key = f"{name}/{what}"
        mine = [r for r in runs if r["path"] == name and r["command"] == what]
        entry: dict = {"path": name, "command": what}
        if key in errors:
            entry.update(state="error", error=errors[key])
        elif key in unused:
            entry.update(state="not used", why=unused[key])
        with_ = {r["round"]: r["metric"] for r in mine if r["role"] == "with"}
        without = {r["round"]: r["metric"] for r in mine if r["role"] == "without"}
        if with_ and without and "state" not in entry:
            a, b = statistics.median(with_.values()), statistics.median(without.values())
            rounds = sorted(set(with_) & set(without))
            entry.update(state="measured", with_median=a, without_median=b, saving_pct=100 * (a / b - 1),
                         round_savings_pct=[100 * (with_[r] / without[r] - 1) for r in rounds], rounds=len(rounds),
                         kernels={role: sorted({kernels_of(r) for r in mine if r["role"] == role}) for role in ("with", "without")},
                         wall_saving_pct=100 * (statistics.median(r["wall_s"] for r in mine if r["role"] == "without") / statistics.median(r["wall_s"] for r in mine if r["role"] == "with") - 1))
        entry.setdefault("state", "not measured")
        out[key] = entry
    return out


def verdict(name: str, summary: dict) -> str:
    """Kept if the path saves >= THRESHOLD % of a command it runs in; the compile variant says
    which of the fused kernels and torch.compile was faster."""
    variant = fpv.VARIANTS[name]
    entries = [summary[f"{name}/{w}"] for w in variant.commands if f"{name}/{w}" in summary]
    if any(e["state"] == "error" for e in entries):
        return "error: see the log"
    measured = [e for e in entries if e["state"] == "measured"]
    if not measured:
        return "not used here: saves 0 % (see NOT USED)" if entries and all(e["state"] == "not used" for e in entries) else "not measured"
    best = max(e["saving_pct"] for e in measured)
    if name == "compile":
        return f"fused kernels faster ({best:+.1f} %): keep them" if best > 0 else f"torch.compile faster ({-best:.1f} %): replace the fused kernels"
    return f"kept (saves {best:.1f} %)" if best >= THRESHOLD else f"deleted (saves {best:.1f} % < {THRESHOLD:g} %)"


def table(selected: list[str], summary: dict, lines: dict) -> list[str]:
    rows = ["| path | lines (Python + C) | train saving % | decode saving % | verdict |", "|---|---|---|---|---|"]
    for name in selected:
        variant = fpv.VARIANTS[name]
        cells = []
        for what in ("train", "decode"):
            e = summary.get(f"{name}/{what}")
            if what not in variant.commands or e is None:
                cells.append("n/a")
            elif e["state"] == "measured":
                cells.append(f"{pct(e['saving_pct'])} (rounds {', '.join(pct(x) for x in e['round_savings_pct'])})")
            else:
                cells.append(e["state"])
        n = lines[name]
        rows.append(f"| {name}: {variant.title} | {n['python']} + {n['c']} | {cells[0]} | {cells[1]} | {verdict(name, summary)} |")
    return rows


def spread(runs: list[dict]) -> dict:
    """Per command: the metric of every process with all paths (min, median, max, spread in %)."""
    out = {}
    for what in ("train", "decode"):
        values = [r["metric"] for r in runs if r["command"] == what and r["process_variant"] == "none"]
        if values:
            med = statistics.median(values)
            out[what] = {"runs": len(values), "min": min(values), "median": med, "max": max(values), "spread_pct": 100 * (max(values) - min(values)) / med}
    return out


def list_paths() -> None:
    for name, variant in fpv.VARIANTS.items():
        n = fpv.code_lines(variant.parts)
        extra = f"; also removes {', '.join(variant.removes_also)}" if variant.removes_also else ""
        print(f"{name}: {variant.title} -- {'/'.join(variant.commands)}; calls counted: {', '.join(variant.counted)}{extra}")
        print(f"  {n['python']} Python + {n['c']} C lines" + (f" ({variant.note})" if variant.note else ""))
        for p in n["parts"]:
            print(f"    {p}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default="all", help=f"comma-separated subset of {','.join(fpv.VARIANTS)} (default all)")
    ap.add_argument("--rounds", type=int, default=2, help="paired rounds per path and command (ABBA over two)")
    ap.add_argument("--updates", type=int, default=100, help="training updates per process; the first 10 are not timed (side_by_side's --updates)")
    ap.add_argument("--threads", type=int, default=2, help="OMP/MKL threads of every process (0: the command's thread policy)")
    ap.add_argument("--sentences", type=int, default=0, help="decode the first N sentences of test_2016_flickr (0: all 1,000)")
    ap.add_argument("--cpu-kernels", default="auto", choices=("auto", "onednn", "aten", "openblas"), help="SYNTAXNMT_CPU_KERNELS of the processes (auto: calibrated, as the command does)")
    ap.add_argument("--calibrate-each", action="store_true", help="every process calibrates its kernels for itself (its variant's own cache) instead of all taking round 0's choice")
    ap.add_argument("--work", default=str(sbs.OUT / "side_by_side"), help="prepared data (shared with side_by_side.py); logs and kernel caches in its fast_paths/")
    ap.add_argument("--out", default=str(sbs.OUT / "fast_paths.json"), help="results (JSON)")
    ap.add_argument("--list", action="store_true", help="list the paths, their code and line counts, and exit")
    args = ap.parse_args()
    if args.list:
        list_paths()
        return 0
    selected = list(fpv.VARIANTS) if args.paths == "all" else [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in selected if p not in fpv.VARIANTS]
    if bad or not selected:
        ap.error(f"unknown path(s) {bad}; choose from {','.join(fpv.VARIANTS)}")
    if args.rounds < 1 or args.updates < 2 or args.sentences < 0 or args.threads < 0:
        ap.error("--rounds at least 1, --updates at least 2, --sentences and --threads at least 0")
    sbs.stop_on_sigterm()
    t_start = time.perf_counter()
    work = Path(args.work).resolve()
    own = work / "fast_paths"
    (own / "logs").mkdir(parents=True, exist_ok=True)
    data_dir = Path(os.environ.get("SYNTAXNMT_DATA", ROOT.parent / "shared" / "data")).resolve()
    os.environ["SYNTAXNMT_DATA"] = str(data_dir)
    machine = machine_info()
    log(f"preparing the shared data in {work / 'data'} (side_by_side.prepare_data)")
    data = sbs.prepare_data(work, data_dir)
    cfg = Path(data["config"])
    test_src = data_dir / "multi30k" / "test_2016_flickr.en.gz"
    n_sentences = data.get("test_sentences")
    if args.sentences:
        lines = read_lines(test_src)[: args.sentences]
        test_src, n_sentences = own / f"test{len(lines)}.en", len(lines)
        atomic_write_text(test_src, "".join(line + "\n" for line in lines))
    env = sbs.clean_env(args.threads)
    env["PYTHONPATH"] = str(ROOT)  # this checkout's syntaxnmt
    if args.cpu_kernels != "auto":
        env["SYNTAXNMT_CPU_KERNELS"] = args.cpu_kernels
    lines_of = {name: fpv.code_lines(fpv.VARIANTS[name].parts) for name in selected}
    pairs = [(name, what) for name in selected for what in fpv.VARIANTS[name].commands]
    plan = schedule(pairs, args.rounds)
    command_line = shlex.join([Path(sys.executable).name, *sys.argv])
    setting = {"updates": args.updates, "timed_updates": args.updates - warmup_updates(args.updates), "rounds": args.rounds, "threads": args.threads or "policy",
               "sentences": n_sentences, "test_src": str(test_src), "cpu_kernels": args.cpu_kernels, "calibrate_each": args.calibrate_each, "threshold_pct": THRESHOLD,
               "beam": sbs.BEAM, "forced_length": sbs.FORCE_LEN, "metric": METRIC}
    runs: list[dict] = []
    fixed: dict[str, str] = {}  # per command: the CPU kernel choice of every process after round 0
    unused: dict[str, str] = {}
    errors: dict[str, str] = {}

    def write(complete: bool) -> dict:
        summary = summarize(runs, pairs, unused, errors)
        result = {
            "command": command_line, "date": _dt.datetime.now().isoformat(timespec="seconds"), "complete": complete, "setting": setting,
            "machine": machine, "variants": {n: {"title": fpv.VARIANTS[n].title, "commands": fpv.VARIANTS[n].commands, "counted": fpv.VARIANTS[n].counted,
                                                 "removes_also": fpv.VARIANTS[n].removes_also, "adds": fpv.VARIANTS[n].adds, "baseline": fpv.VARIANTS[n].baseline, "note": fpv.VARIANTS[n].note, "lines": lines_of[n]} for n in selected},
            "runs": runs, "summary": summary, "verdicts": {n: verdict(n, summary) for n in selected}, "all_paths_spread": spread(runs),
            "table": table(selected, summary, lines_of), "errors": errors, "total_seconds": time.perf_counter() - t_start,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(result, indent=1))
        return result

    def left(name: str, what: str) -> int:
        """The processes of a pair not run yet."""
        return sum(1 for p in plan if p[1:3] == (name, what)) - sum(1 for x in runs if x["path"] == name and x["command"] == what)

    def measure(r: int, what: str, pv: str, log_path: Path, what_for: str) -> tuple[dict, dict, dict]:
        """One process: ``what`` without ``pv``'s path (``none``: all paths), with the fixed kernel
        choice of ``what`` when there is one: (run_measured's figures, RESULT, PATHS)."""
        run_env = {**env, "SYNTAXNMT_CACHE_DIR": str(own / "cache" / pv)}  # used where a process calibrates
        if pv == "compile":  # compiled cold in every round: an empty inductor cache of its own
            inductor = own / "inductor-cache" / f"r{r}"
            shutil.rmtree(inductor, ignore_errors=True)
            run_env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
        res = sbs.run_measured(command(what, pv, cfg, args.updates, test_src, fixed.get(what)), log_path, run_env, ROOT)
        sbs.check_rc(res, what_for, log_path)
        return res, sbs._result_line(log_path), paths_line(log_path)

    def record(r: int, name: str, what: str, role: str, pv: str, res: dict, result: dict, paths: dict, load_before: float) -> dict:
        run = {"round": r, "path": name, "command": what, "role": role, "process_variant": pv, "metric": result[METRIC[what]], "calls": paths["calls"],
               "wall_s": res["wall_s"], "peak_mb": res["peak_mb"], "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0], "result": result}
        if "compile" in paths:
            run["compile"] = paths["compile"]
        runs.append(run)
        return run

    commands_used = [w for w in ("train", "decode") if any(p[1] == w for p in pairs)]
    calibrations = [] if args.calibrate_each else commands_used
    log(f"{len(calibrations) + len(plan)} processes: {len(calibrations)} calibrating, then {len(pairs)} (path, command) pairs x 2 x {args.rounds} rounds")
    with tqdm(total=len(calibrations) + len(plan), desc="fast paths", unit="process", file=sys.stderr) as bar:
        for what in calibrations:  # round 0: all paths, the kernels calibrated once; every later process runs with that choice
            bar.set_postfix_str(f"round 0 {what}: all paths, calibrating the kernels")
            load_before = os.getloadavg()[0]
            try:
                run = record(0, CALIBRATION, what, "with", "none", *measure(0, what, "none", own / "logs" / f"r0-calibration-{what}.log", f"{what} with all paths (calibration)"), load_before)
            except sbs.Failure as e:
                errors[f"{CALIBRATION}/{what}"] = str(e)
                log(f"ERROR {e}")
                write(False)
                return 1
            fixed[what] = str((run["result"].get("cpu_kernels") or {}).get("choice"))
            setting["fixed_choices"] = dict(fixed)
            bar.update(1)
            log(f"round 0 {what} with all paths: {run['metric']:.1f} {UNITS[what]}; cpu kernels {fixed[what]}, fixed for every process from now on")
            write(False)
        for r, name, what, role in plan:
            key = f"{name}/{what}"
            if key in unused or key in errors:  # skipped: counted in the bar when it was decided
                continue
            variant = fpv.VARIANTS[name]
            pv = process_variant(name, role)
            bar.set_postfix_str(f"round {r} {key} {role}")
            load_before = os.getloadavg()[0]
            try:
                res, result, paths = measure(r, what, pv, own / "logs" / f"r{r}-{name}-{what}-{role}.log", f"{key} ({role} the path, round {r})")
                calls = sum(paths["calls"].get(n, 0) for n in variant.counted)
                if role == "without" and calls:
                    raise sbs.Failure(f"{key}: the process without the path called it {calls} times ({paths['calls']}): the patch did not take; nothing measured")
            except sbs.Failure as e:
                errors[key] = str(e)
                log(f"ERROR {e}")
                bar.update(left(name, what))  # this one and the pair's others
                write(False)
                continue
            run = record(r, name, what, role, pv, res, result, paths, load_before)
            bar.update(1)
            log(f"round {r} {key} {role} the path: {run['metric']:.1f} {UNITS[what]} ({res['wall_s']:.0f} s; calls into it: {calls})")
            if role == "with" and not calls:
                kernels = (result.get("cpu_kernels") or {}).get("choice")
                unused[key] = f"no call into it with every path ({variant.title}; cpu kernels: {kernels}; threads {result.get('torch_threads')})"
                bar.update(left(name, what))
                log(f"{key}: not used in this command here ({unused[key]}): its other processes are skipped")
            write(False)

    # The thread variables the measured processes started with (not this one's), as side_by_side.py records them.
    machine = with_load_after(machine) | {"threads": args.threads or "the command's thread policy", "env": {k: env.get(k) for k in THREAD_VARIABLES}}
    result = write(True)
    print(f"fast paths: {args.updates} training updates ({setting['timed_updates']} timed), beam {sbs.BEAM} forced to {sbs.FORCE_LEN} pieces on "
          f"{setting['sentences']} sentences, {args.rounds} paired round(s); saving = median with / median without - 1")
    for line in result["table"]:
        print(line)
    for key, e in result["summary"].items():
        if e["state"] == "measured":
            base = fpv.VARIANTS[e["path"]].baseline
            print(f"{key}: with the path {e['with_median']:.1f}, without {e['without_median']:.1f} {UNITS[e['command']]} (medians of {e['rounds']} round(s)"
                  f"{'' if base == 'none' else f'; with = the process without {base}'}): saving {e['saving_pct']:+.1f} %"
                  f"; cpu kernels with {'/'.join(e['kernels']['with'])}, without {'/'.join(e['kernels']['without'])}")
    for what, s in result["all_paths_spread"].items():
        print(f"all paths, {what}: {s['runs']} processes, {s['min']:.1f} .. {s['max']:.1f} {UNITS[what]} (median {s['median']:.1f}, spread {s['spread_pct']:.1f} %)")
    for r in runs:
        if "compile" in r:
            c = r["compile"]
            graphs = lambda at: (c.get(at) or {}).get("unique_graphs")  # noqa: E731
            late = None if graphs("timed_start") is None or graphs("at_end") is None else graphs("at_end") - graphs("timed_start")
            step_s = r["result"]["tokens_per_update"] / r["metric"]
            print(f"compile, round {r['round']}: prepass {c.get('prepass_s', float('nan')):.0f} s over {c.get('prepass_steps')} steps ({c.get('shapes')} batch shapes; "
                  f"{graphs('after_compile')} graphs, {(c.get('after_compile') or {}).get('graph_breaks')} graph breaks), compilation about "
                  f"{c.get('prepass_s', float('nan')) - c.get('prepass_steps', 0) * step_s:.0f} s (the prepass less its steps at the measured {step_s:.2f} s/update); "
                  f"graphs compiled in the warm-up updates: {None if graphs('timed_start') is None else graphs('timed_start') - graphs('after_compile')}, in the timed ones: {late}"
                  + (" (their compilation is in the measured time)" if late else ""))
    for name in selected:
        v = fpv.VARIANTS[name]
        notes = [f"also removes {', '.join(v.removes_also)}"] if v.removes_also else []
        notes += [v.note] if v.note else []
        if notes:
            print(f"{name}: {'; '.join(notes)}")
    for key, why in unused.items():
        print(f"NOT USED {key}: {why}")
    for key, e in errors.items():
        print(f"ERROR {key}: {e.splitlines()[0]}")
    print(machine_summary(machine))
    print(f"results: {args.out} (total {result['total_seconds']:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(lambda: sys.exit(main()))
