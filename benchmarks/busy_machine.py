"""Training and translation speed on a quiet machine and beside one competing CPU-bound process,
for syntaxnmt's default thread setting, 1 thread and 2 threads, syntaxnmt and OpenNMT-py side by side.

    python benchmarks/busy_machine.py [--updates 60] [--sentences 200] [--settings default,1,2,torch]
        [--toolkits onmt,syntaxnmt] [--repeats 1] [--settle 60] [--json benchmarks/out/busy_machine.json] [--isa native|avx2]
    python benchmarks/busy_machine.py --config CFG --test-src FILE [...]   # syntaxnmt alone, any prepared config

Issue 26, item 4. Data, model and measurements are those of ``benchmarks/side_by_side.py`` (its
prepared Multi30k data and configs in ``--work``, shared with it): training target tokens/s over
updates ``--warmup``+1..``--updates`` (the toolkit's own log or timer), and decoding with beam 5,
every hypothesis forced to 20 pieces, over the first ``--sentences`` test_2016_flickr sentences
(tokens/s = 20 x sentences/s by the toolkit's own timer). Every measurement runs in fresh
processes, one after another.

Settings (``--settings``):

- ``default``: what a user gets. syntaxnmt as its command runs (``syntaxnmt/__main__.py`` sets
  ``GOMP_SPINCOUNT=3000``, a short spin, before torch loads; ``cpu.threads.configure_threads`` chooses the threads:
  docs/benchmarks.md, "Thread policy"); OpenNMT-py with torch's defaults.
- ``N`` (``1``, ``2``, ...): N threads. syntaxnmt ``--threads N`` (the short spin as by default);
  OpenNMT-py ``OMP_NUM_THREADS=MKL_NUM_THREADS=N``.
- ``torch``: syntaxnmt before the thread policy: torch's default threads and libgomp's own waiting
  (``GOMP_SPINCOUNT=300000``, libgomp's value when ``OMP_WAIT_POLICY`` is unset). Not run for the
  peer (it is the peer's ``default``).
- ``N:S`` (``2:0``, ``2:3000``, ...): syntaxnmt with N threads and ``GOMP_SPINCOUNT=S`` (how long a
  waiting OpenMP thread spins before it sleeps; 0 = ``OMP_WAIT_POLICY=PASSIVE``). Compares ways of
  waiting, quiet and busy: ``--toolkits syntaxnmt --settings 2:0,2:3000,2:30000``. Not run for the peer.

Every process starts without the user's ``OMP_*``/``MKL_NUM_THREADS``/``GOMP_SPINCOUNT``. With
``--isa avx2`` every measured process (syntaxnmt's and OpenNMT-py's) runs with ATen, oneDNN and MKL
restricted to AVX2 (``benchmarks/_isa.py``): an emulation of an AVX2 machine on this CPU, which the
machine record says; the default results file is then ``busy_machine-avx2.json``.

Conditions (``--conditions``): ``quiet``: nothing started by this script (the load average
before and after each measurement tells how quiet the machine was); ``busy``: one competing
process, a Python busy loop (one core) that this script starts, and stops when the phase ends (it
also stops on its own after ``--busy-limit`` seconds or when this script dies). The busy
measurements begin ``--settle`` seconds after it starts, so that the 1-minute load average counts
it as it counts a job that has been running for a while. Each measurement records the load
average before and after, the threads syntaxnmt chose, and the share of a core the competing
process got meanwhile.

Printed: a table of medians over ``--repeats`` rounds, the ratios syntaxnmt/OpenNMT-py per setting
and condition, the issue's targets as measured (busy ratio no worse than quiet; default within 5%
of 1 thread when busy and of the best fixed setting when quiet), and the machine
(``syntaxnmt.cpu.machine.machine_info``). Everything goes to ``--json``. OpenNMT-py runs only where
``benchmarks/peers/install.sh onmt`` has installed it (``PEERS_VENVS``); otherwise it is skipped
with a message. ``--tiny``: 20 updates, 20 sentences, settings default and 1, no settling (checks
the pipeline).
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
import shlex
import statistics
import subprocess
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side as sbs  # noqa: E402

from syntaxnmt.cpu.machine import THREAD_VARIABLES, describe_isa_limits, isa_limits, machine_info, machine_summary, with_load_after  # noqa: E402
from syntaxnmt.cpu.threads import load_average  # noqa: E402
from syntaxnmt.errors import UserError  # noqa: E402
from syntaxnmt.textio import atomic_write_text, read_lines  # noqa: E402

ROOT = sbs.ROOT
TOOLKITS = ("onmt", "syntaxnmt")
NAMES = {"onmt": "OpenNMT-py 3.5.1", "syntaxnmt": "syntaxnmt"}
CONDITIONS = ("quiet", "busy")
TOLERANCE = 0.95  # issue 26: the default never slower than the compared setting by more than 5 %
LIBGOMP_DEFAULT_SPIN = "300000"

# One core kept busy until a deadline, or until the process that started it is gone.
BUSY_LOOP = """
import os, sys, time
end, parent = time.monotonic() + float(sys.argv[1]), os.getppid()
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(100000):
        pass
"""


def log(msg: str) -> None:
    print(f"[busy-machine] {msg}", file=sys.stderr, flush=True)


class Competitor:
    """The competing CPU-bound process of the busy condition."""

    def __init__(self, limit_s: float):
        self.proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(limit_s)], stdin=subprocess.DEVNULL)

    def cpu_seconds(self) -> float | None:
        """CPU time the competitor has used (user + system), from /proc; None if unknown."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)


def base_env(isa: str = "native") -> dict:
    """The environment of every measured process: side_by_side's (with ``isa``'s instruction-set
    limits), without the thread variables."""
    env = sbs.clean_env(0, isa)
    for k in THREAD_VARIABLES:
        env.pop(k, None)
    return env


def syntaxnmt_only(setting: str) -> bool:
    """Settings measured for syntaxnmt alone: ``torch`` and ``N:S`` (threads and spin count)."""
    return setting == "torch" or ":" in setting


def valid_setting(setting: str) -> bool:
    threads, colon, spin = setting.partition(":")
    return setting in ("default", "torch") or (threads.isdigit() and int(threads) > 0 and (not colon or spin.isdigit()))


def syntaxnmt_env(setting: str, isa: str = "native") -> tuple[dict, str]:
    """(environment, run_syntaxnmt.py --threads value) of a syntaxnmt measurement."""
    env = base_env(isa) | {"PYTHONPATH": str(ROOT)}  # this checkout's syntaxnmt
    if setting == "torch":
        return env | {"GOMP_SPINCOUNT": LIBGOMP_DEFAULT_SPIN}, "torch"
    if ":" in setting:
        threads, spin = setting.split(":")
        return env | {"GOMP_SPINCOUNT": spin}, threads
    return env, "policy" if setting == "default" else setting


def peer_env(setting: str, isa: str = "native") -> dict:
    env = base_env(isa)
    if setting.isdigit():
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = setting
    return env


def measure_syntaxnmt(cfg: str, test_src: Path, updates: int, warmup: int, setting: str, run_dir: Path, isa: str = "native") -> dict:
    """Training and decoding figures of syntaxnmt in ``setting`` (two processes)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env, threads = syntaxnmt_env(setting, isa)
    script = str(sbs.PEERS_DIR / "run_syntaxnmt.py")
    tlog, dlog = run_dir / "train.log", run_dir / "decode.log"
    cmd = [sys.executable, script, "train", "--config", cfg, "--updates", str(updates - warmup), "--warmup", str(warmup), "--threads", threads]
    sbs.check_rc(sbs.run_measured(cmd, tlog, env, ROOT), "syntaxnmt training", tlog)
    t = sbs._result_line(tlog)
    cmd = [sys.executable, script, "decode", "--config", cfg, "--test-src", str(test_src), "--beam", str(sbs.BEAM), "--force-length", str(sbs.FORCE_LEN), "--threads", threads]
    sbs.check_rc(sbs.run_measured(cmd, dlog, env, ROOT), "syntaxnmt decoding", dlog)
    d = sbs._result_line(dlog)
    return {
        "train_tok_s": t["train_tok_s"], "decode_sent_s": d["decode_sent_s_own_timer"], "sentences": d["sentences"],
        "threads": str(t["torch_threads"]) if t["torch_threads"] == d["torch_threads"] else f"{t['torch_threads']}/{d['torch_threads']}",
        "train_threads": t["threads"], "decode_threads": d["threads"], "omp_wait_policy": d.get("omp_wait_policy"), "gomp_spincount": d.get("gomp_spincount"),
        "torch_cpu_capability": d.get("torch_cpu_capability"),  # the measured processes' own (AVX2 with --isa avx2)
    }


def measure_peer(work: Path, pieces: Path, test: str, n_test: int, updates: int, setting: str, run_dir: Path, isa: str = "native") -> dict:
    """Training and decoding figures of OpenNMT-py in ``setting`` (side_by_side's OpenNMT runner)."""
    kit = sbs.OpenNMT(work, pieces, peer_env(setting, isa), updates, tiny=False)
    kit.root, kit.test, kit.n_test = run_dir, test, n_test
    run_dir.mkdir(parents=True, exist_ok=True)
    res = kit.run(1)
    if res["hyp_lengths"] != [sbs.FORCE_LEN]:
        raise sbs.Failure(f"onmt: hypothesis lengths {res['hyp_lengths']}, expected all {sbs.FORCE_LEN}")
    threads = setting if setting.isdigit() else "torch's"
    return {"train_tok_s": res["train_tok_s"], "decode_sent_s": res["decode_sent_s"], "sentences": res["sentences"], "threads": threads}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def summarize(measurements: list[dict], toolkits: list[str], settings: list[str], conditions: list[str]) -> tuple[dict, dict, dict, list[str]]:
    """Medians per (toolkit, setting, condition), ratios syntaxnmt/peer, the issue's targets, table lines."""
    medians: dict = {}
    for m in measurements:
        if "error" in m:
            continue
        key = f"{m['toolkit']}/{m['setting']}/{m['condition']}"
        medians.setdefault(key, {"train_tok_s": [], "decode_tok_s": [], "threads": m["threads"]})
        medians[key]["train_tok_s"].append(m["train_tok_s"])
        medians[key]["decode_tok_s"].append(m["decode_tok_s"])
    for v in medians.values():
        v["runs"] = len(v["train_tok_s"])
        v["train_tok_s"], v["decode_tok_s"] = statistics.median(v["train_tok_s"]), statistics.median(v["decode_tok_s"])

    def get(t: str, s: str, c: str, k: str) -> float | None:
        return medians.get(f"{t}/{s}/{c}", {}).get(k)

    lines = [f"{'toolkit':<18}{'setting':<9}" + "".join(f"{c + ' ' + what:>20}" for what in ("train tok/s", "decode tok/s") for c in conditions)
             + ("".join(f"{'busy/quiet ' + w:>19}" for w in ("train", "decode")) if len(conditions) == 2 else "") + "  threads (train/decode if they differ)"]
    for t in toolkits:
        for s in settings:
            if t != "syntaxnmt" and syntaxnmt_only(s):
                continue
            row = f"{NAMES[t]:<18}{s:<9}" + "".join(f"{fmt(get(t, s, c, k)):>20}" for k in ("train_tok_s", "decode_tok_s") for c in conditions)
            if len(conditions) == 2:
                row += "".join(f"{fmt(ratio(get(t, s, 'busy', k), get(t, s, 'quiet', k)), '.2f'):>19}" for k in ("train_tok_s", "decode_tok_s"))
            row += "  " + "; ".join(f"{c}: {get(t, s, c, 'threads') or '-'}" for c in conditions)
            lines.append(row)
    ratios: dict = {}
    if "onmt" in toolkits and "syntaxnmt" in toolkits:
        for s in settings:
            if syntaxnmt_only(s):
                continue
            for c in conditions:
                ratios[f"{s}/{c}"] = {k: ratio(get("syntaxnmt", s, c, k), get("onmt", s, c, k)) for k in ("train_tok_s", "decode_tok_s")}
                shown = {k: "-" if v is None else f"x{v:.2f}" for k, v in ratios[f"{s}/{c}"].items()}
                lines.append(f"syntaxnmt/OpenNMT-py, {s}, {c}: train {shown['train_tok_s']}, decode {shown['decode_tok_s']}")
    targets: dict = {}
    for k in ("train_tok_s", "decode_tok_s"):
        what = k.split("_")[0]
        if "default/quiet" in ratios and "default/busy" in ratios:
            q, b = ratios["default/quiet"][k], ratios["default/busy"][k]
            targets[f"{what}: busy ratio to the peer no worse than quiet"] = {"busy": b, "quiet": q, "met": None if q is None or b is None else b >= q}
        if "busy" in conditions and "1" in settings:
            r = ratio(get("syntaxnmt", "default", "busy", k), get("syntaxnmt", "1", "busy", k))
            targets[f"{what}: busy, default / 1 thread >= {TOLERANCE}"] = {"ratio": r, "met": None if r is None else r >= TOLERANCE}
        fixed = [(s, get("syntaxnmt", s, "quiet", k)) for s in settings if s != "default" and get("syntaxnmt", s, "quiet", k)]
        if "quiet" in conditions and fixed:
            best, best_v = max(fixed, key=lambda x: x[1])
            r = ratio(get("syntaxnmt", "default", "quiet", k), best_v)
            targets[f"{what}: quiet, default / best fixed setting ({best}) >= {TOLERANCE}"] = {"ratio": r, "best": best, "met": None if r is None else r >= TOLERANCE}
    for name, v in targets.items():
        shown = ", ".join(f"{key} {fmt(x, '.2f')}" for key, x in v.items() if key not in ("met", "best"))
        lines.append(f"target {name}: {shown} -> {'met' if v['met'] else 'not met' if v['met'] is False else 'not measured'}")
    return medians, ratios, targets, lines


def shared_setting(args, work: Path) -> tuple[str, Path, str, int, Path]:
    """side_by_side's prepared data and config: (syntaxnmt config, raw test source, the peer's test
    name, sentences, piece folder)."""
    data_dir = Path(os.environ.get("SYNTAXNMT_DATA", ROOT.parent / "shared" / "data")).resolve()
    os.environ["SYNTAXNMT_DATA"] = str(data_dir)
    if not (data_dir / "multi30k" / "train.en.gz").is_file():
        raise UserError(f"{data_dir / 'multi30k'}: no Multi30k data (set SYNTAXNMT_DATA, or measure syntaxnmt alone with --config and --test-src)")
    log(f"preparing the shared data in {work / 'data'} (benchmarks/side_by_side.py's)")
    info = sbs.prepare_data(work, data_dir)
    pieces = Path(info["pieces"])
    raw = read_lines(data_dir / "multi30k" / "test_2016_flickr.en.gz")
    n = min(args.sentences, len(raw))
    test = "test" if n == len(raw) else f"test{n}"
    if test != "test":
        (pieces / f"{test}.en").write_text("".join(line + "\n" for line in (pieces / "test.en").read_text(encoding="utf-8").splitlines()[:n]), encoding="utf-8")
    test_src = work / "busy_machine" / f"test{n}.raw.en"
    test_src.parent.mkdir(parents=True, exist_ok=True)
    test_src.write_text("".join(line + "\n" for line in raw[:n]), encoding="utf-8")
    return info["config"], test_src, test, n, pieces


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=60, help="training updates per measurement; updates --warmup+1.. are timed")
    ap.add_argument("--warmup", type=int, default=sbs.SKIP_UPDATES, help=f"untimed first updates (the peer: {sbs.SKIP_UPDATES})")
    ap.add_argument("--sentences", type=int, default=200, help="test sentences decoded per measurement")
    ap.add_argument("--settings", default="default,1,2", help="comma-separated: default, torch, a thread count N, or N:S (N threads, GOMP_SPINCOUNT=S; syntaxnmt only)")
    ap.add_argument("--conditions", default=",".join(CONDITIONS), help="quiet, busy or both")
    ap.add_argument("--toolkits", default=",".join(TOOLKITS), help="onmt, syntaxnmt or both")
    ap.add_argument("--repeats", type=int, default=1, help="rounds; medians are reported")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds between starting the competing process and the first busy measurement")
    ap.add_argument("--busy-limit", type=float, default=4 * 3600.0, help="the competing process stops on its own after this many seconds")
    ap.add_argument("--config", help="measure syntaxnmt alone on this prepared config (with --test-src) instead of side_by_side's setting")
    ap.add_argument("--test-src", help="with --config: source sentences to decode (the first --sentences)")
    ap.add_argument("--tiny", action="store_true", help="20 updates, 20 sentences, settings default and 1, no settling")
    ap.add_argument("--work", default=str(sbs.OUT / "side_by_side"), help="side_by_side's data folder (shared); runs go to WORK/busy_machine")
    ap.add_argument("--json", help="results file (default benchmarks/out/busy_machine.json, busy_machine-avx2.json with --isa avx2)")
    _isa.add_isa_argument(ap)
    args = ap.parse_args()
    sbs.stop_on_sigterm()
    args.json = args.json or str(sbs.OUT / ("busy_machine.json" if args.isa == "native" else f"busy_machine-{args.isa}.json"))
    if args.tiny:
        args.updates, args.sentences, args.settle = 20, 20, 0.0
        if args.settings == ap.get_default("settings"):
            args.settings = "default,1"
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    toolkits = [t.strip() for t in args.toolkits.split(",") if t.strip()]
    if not settings or not all(valid_setting(s) for s in settings):
        raise UserError(f"--settings {args.settings!r}: default, torch, thread counts N or N:SPINCOUNT")
    if not conditions or set(conditions) - set(CONDITIONS):
        raise UserError(f"--conditions {args.conditions!r}: quiet, busy or both")
    if not toolkits or set(toolkits) - set(TOOLKITS):
        raise UserError(f"--toolkits {args.toolkits!r}: onmt, syntaxnmt or both")
    if args.config:
        if not args.test_src:
            raise UserError("--config needs --test-src (the sentences to decode)")
        if "onmt" in toolkits:
            log("--config: OpenNMT-py runs only in side_by_side's setting; measuring syntaxnmt alone")
            toolkits = ["syntaxnmt"]
    if args.updates <= args.warmup or args.warmup < 0 or args.sentences < 1 or args.repeats < 1:
        raise UserError("--updates must exceed --warmup (>= 0); --sentences and --repeats at least 1")
    skipped = {}
    if "onmt" in toolkits:
        if not (sbs.VENVS / "onmt" / ".stamp").is_file():
            skipped["onmt"] = f"not installed in {sbs.VENVS / 'onmt'} (run benchmarks/peers/install.sh onmt, or point PEERS_VENVS at the installed peers)"
        elif args.warmup != sbs.SKIP_UPDATES or args.updates % sbs.LOG_INTERVAL:
            skipped["onmt"] = f"its figures come from its log: --warmup {sbs.SKIP_UPDATES} and --updates a multiple of {sbs.LOG_INTERVAL} are needed"
        if "onmt" in skipped:
            log(f"OpenNMT-py skipped: {skipped['onmt']}")
            toolkits.remove("onmt")
    if not toolkits:
        raise UserError("nothing to measure")

    work = Path(args.work).resolve()
    runs_dir = work / "busy_machine"
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    machine, t_start = machine_info(), time.perf_counter()
    if args.config:
        cfg, test_src = str(Path(args.config).resolve()), Path(args.test_src).resolve()
        lines = read_lines(test_src)[: args.sentences]
        test_src = runs_dir / "test.src"
        runs_dir.mkdir(parents=True, exist_ok=True)
        test_src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        peer_test, n_test, pieces = "", len(lines), None
    else:
        cfg, test_src, peer_test, n_test, pieces = shared_setting(args, work)

    measurements: list[dict] = []
    errors: dict[str, str] = {}
    for r in range(1, args.repeats + 1):
        order = settings[(r - 1) % len(settings):] + settings[: (r - 1) % len(settings)]  # rotated each round
        for condition in conditions:
            competitor = None
            try:
                if condition == "busy":
                    competitor = Competitor(args.busy_limit)
                    log(f"round {r}: competing process {competitor.proc.pid} started; settling {args.settle:.0f} s (load average {load_average()})")
                    time.sleep(args.settle)
                for setting in order:
                    for t in toolkits:
                        if t != "syntaxnmt" and syntaxnmt_only(setting):
                            continue
                        run_dir = runs_dir / t / f"{condition}-{setting}"
                        log(f"round {r}/{args.repeats}, {condition}: {NAMES[t]}, setting {setting}")
                        before, t0, busy0 = load_average(), time.perf_counter(), competitor.cpu_seconds() if competitor else None
                        entry = {"toolkit": t, "setting": setting, "condition": condition, "round": r, "load_average_before": before}
                        try:
                            if t == "syntaxnmt":
                                res = measure_syntaxnmt(cfg, test_src, args.updates, args.warmup, setting, run_dir, args.isa)
                            else:
                                res = measure_peer(work, pieces, peer_test, n_test, args.updates, setting, run_dir, args.isa)
                        except sbs.Failure as e:
                            errors[f"{t}/{setting}/{condition}"] = str(e)
                            log(f"  {t}: {e}")
                            measurements.append(entry | {"error": str(e)})
                            continue
                        wall = time.perf_counter() - t0
                        busy1 = competitor.cpu_seconds() if competitor else None
                        entry |= res | {
                            "decode_tok_s": res["decode_sent_s"] * sbs.FORCE_LEN, "seconds": wall, "load_average_after": load_average(),
                            "competitor_core_share": None if busy0 is None or busy1 is None else (busy1 - busy0) / wall,
                        }
                        measurements.append(entry)
                        log(f"  train {entry['train_tok_s']:.0f} tok/s, decode {entry['decode_tok_s']:.0f} tok/s ({entry['decode_sent_s']:.1f} sent/s), "
                            f"threads {entry['threads']}" + (f" [{entry['train_threads']}]" if "train_threads" in entry else "") + f", load {before[0] if before else '?'} -> {entry['load_average_after'][0] if entry['load_average_after'] else '?'}"
                            + (f", competitor {entry['competitor_core_share']:.2f} core" if entry["competitor_core_share"] is not None else ""))
            finally:
                if competitor:
                    competitor.stop()

    with_load_after(machine)
    child = base_env(args.isa)  # the instruction-set limits every measured process started with
    machine |= {"isa_option": args.isa, "isa_limits": isa_limits(child), "isa_note": describe_isa_limits(isa_limits(child)) or None}
    medians, ratios, targets, lines = summarize(measurements, toolkits, settings, conditions)
    print(f"busy machine: training target tok/s (updates {args.warmup + 1}..{args.updates}), decoding tok/s (beam {sbs.BEAM}, every hypothesis {sbs.FORCE_LEN} pieces, "
          f"{n_test} sentences); medians of {args.repeats} round(s); busy = beside one competing busy-loop process, {args.settle:.0f} s after it started")
    for line in lines:
        print(line)
    for t, why in skipped.items():
        print(f"{NAMES[t]}: skipped, {why}")
    for key, e in errors.items():
        print(f"ERROR {key}: {e.splitlines()[0]}")
    print(machine_summary(machine))
    result = {
        "command": command, "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "setting": {"config": cfg, "test_src": str(test_src), "sentences": n_test, "updates": args.updates, "warmup": args.warmup, "beam": sbs.BEAM,
                    "forced_length": sbs.FORCE_LEN, "settings": settings, "conditions": conditions, "settle_s": args.settle, "repeats": args.repeats, "isa": args.isa},
        "toolkits": toolkits, "skipped": skipped, "machine": machine, "measurements": measurements, "medians": medians,
        "ratios_syntaxnmt_over_peer": ratios, "targets": targets, "table": lines, "errors": errors, "total_seconds": time.perf_counter() - t_start,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(result, indent=1))
    print(f"results: {args.json} (total {result['total_seconds']:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(lambda: sys.exit(main()))
