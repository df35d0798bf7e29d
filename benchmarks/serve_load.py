"""Load test of ``syntaxnmt serve``: N requests at C concurrent against a local server.

    python benchmarks/serve_load.py [--checkpoint PATH] [--requests 1000] [--concurrency 50]
                                    [--sentences-per-request 1] [--beam B] [--device cpu] [--threads T]

Starts ``syntaxnmt serve`` in its own process on a free port of 127.0.0.1 (the checkpoint given,
or by default the demo's small Transformer trained for ``--minutes`` on the synthetic corpus in
``--dir``, trained once and reused), then sends the requests from one asyncio client (httpx),
at most C in flight, each with sentences drawn in turn from the synthetic test and dev splits.
Prints the errors (must be 0), sentences whose answers differed between requests (must be 0),
the latency of a request (p50, p95, p99, max) and the throughput in sentences/s, and the machine
(``syntaxnmt.runtime.machine_info``, load average before and after); all also go to ``--json``
(default benchmarks/out/serve_load.json). The server runs as the ``syntaxnmt`` command does
(passive OpenMP waiting, the thread policy unless ``--threads``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx

from syntaxnmt.runtime import machine_info, machine_summary, with_load_after
from syntaxnmt.textio import atomic_write_text


def default_checkpoint(directory: Path, minutes: float, threads: int) -> Path:
    """The demo model of ``directory`` (trained for ``minutes`` the first time, validated every
    100 updates; ``last.pt`` if no validation has run)."""
    from syntaxnmt.runtime import keep_freed_memory
    from syntaxnmt.experiments.demo import demo_config
    from syntaxnmt.data.prepare import prepare
    from syntaxnmt.data.synthetic import write_corpus
    from syntaxnmt.training.train import train

    keep_freed_memory()  # as the syntaxnmt command does
    cfg = demo_config(directory, minutes, ["--train.valid_every=100", f"--train.threads={threads}"])
    run = Path(cfg.work_dir)
    if not (run / "last.pt").is_file():
        if not (directory / "corpus" / "test.src").is_file():
            write_corpus(directory / "corpus", seed=1)
        print(f"training the demo model for {minutes} min in {directory} (once)", flush=True)
        prepare(cfg, log=lambda *_: None)
        train(cfg, log=lambda *_: None)
    return run / "best.pt" if (run / "best.pt").is_file() else run / "last.pt"


def sentence_pool(directory: Path) -> list[str]:
    lines = []
    for split in ("test", "dev"):
        path = directory / "corpus" / f"{split}.src"
        if path.is_file():
            lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        from syntaxnmt.data.synthetic import write_corpus

        files = write_corpus(directory / "corpus", seed=1)
        lines = files["test"]["src"].read_text(encoding="utf-8").splitlines()
    return lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, port: int, device: str, threads: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "syntaxnmt", "serve", "--checkpoint", str(checkpoint), "--port", str(port), "--device", device, "--parser", "none", "--max-sentences", "64"]
    if threads:
        cmd += ["--threads", str(threads)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        try:
            r = httpx.get(f"{url}/health", timeout=2)
            if r.status_code == 200:
                return r.json()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    sys.exit("the server did not come up")


async def load(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], list[str], list[dict | None], float]:
    """Send every body, at most ``concurrency`` in flight; (latencies, errors, answers, wall seconds)."""
    latencies: list[float] = []
    errors: list[str] = []
    answers: list[dict | None] = [None] * len(bodies)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(bodies)):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                t0 = time.perf_counter()
                try:
                    r = await client.post("/translate", json=bodies[i])
                    if r.status_code != 200:
                        errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    elif len(r.json()["translations"]) != len(bodies[i]["sentences"]):
                        errors.append("wrong number of translations")
                    else:
                        answers[i] = r.json()
                except httpx.HTTPError as e:
                    errors.append(f"{type(e).__name__}: {e}")
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return latencies, errors, answers, wall


def inconsistent(bodies: list[dict], answers: list[dict | None]) -> int:
    """Sentences that got different translations in different requests (must be 0)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for body, ans in zip(bodies, answers):
        if ans is not None:
            for s, t in zip(body["sentences"], ans["translations"]):
                seen[s].add(t)
    return sum(len(v) > 1 for v in seen.values())


def percentile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="a checkpoint to serve (default: the demo model in --dir)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "syntaxnmt-serve-load"), help="corpus and default model")
    ap.add_argument("--minutes", type=float, default=5.0, help="training time of the default model (first run only)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--sentences-per-request", type=int, default=1)
    ap.add_argument("--beam", type=int, help="beam size (default: the model's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the server and of training the default model (0: the thread policy of the syntaxnmt command)")
    ap.add_argument("--json", default="benchmarks/out/serve_load.json", help="figures and the machine record")
    args = ap.parse_args()

    directory = Path(args.dir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server (finally) on kill too
    checkpoint = Path(args.checkpoint) if args.checkpoint else default_checkpoint(directory, args.minutes, args.threads)
    pool = sentence_pool(directory)
    k = args.sentences_per_request
    bodies = [{"sentences": [pool[(i * k + j) % len(pool)] for j in range(k)], **({"beam": args.beam} if args.beam else {})} for i in range(args.requests)]

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    machine = machine_info()
    proc = start_server(checkpoint, port, args.device, args.threads)
    try:
        info = wait_ready(url, proc)
        asyncio.run(load(url, bodies[: min(20, len(bodies))], 5))  # warm-up
        before = httpx.get(f"{url}/health").json()["served"]
        latencies, errors, answers, wall = asyncio.run(load(url, bodies, args.concurrency))
        after = httpx.get(f"{url}/health").json()["served"]
    finally:
        proc.terminate()
        proc.wait(30)
    with_load_after(machine)

    n_sent = sum(len(b["sentences"]) for b in bodies)
    print(f"server: {checkpoint} on {info['device']} ({info['arch']}, {info['encoder_layers']}+{info['decoder_layers']} layers), beam {args.beam or info['beam']}, threads {args.threads or 'default'}")
    server_threads = args.threads or "the thread policy's"
    print(machine_summary(machine) + f" (this script's; the server runs as `python -m syntaxnmt serve`, with the command's OpenMP defaults and {server_threads} threads)")
    print(f"requests: {len(bodies)} ({n_sent} sentences, {k} per request), {args.concurrency} concurrent")
    print(f"errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    print(f"inconsistent answers: {inconsistent(bodies, answers)}")
    ms = [x * 1000 for x in latencies]
    print(f"latency ms: p50 {percentile(ms, 50):.0f}, p95 {percentile(ms, 95):.0f}, p99 {percentile(ms, 99):.0f}, max {max(ms):.0f}")
    batches = after["batches"] - before["batches"]
    print(f"server batches: {batches} (mean {(after['items'] - before['items']) / max(batches, 1):.1f} sentences, {(after['jobs'] - before['jobs']) / max(batches, 1):.1f} requests)")
    print(f"throughput: {n_sent / wall:.1f} sentences/s ({len(bodies) / wall:.1f} requests/s, {wall:.1f} s)")
    doc = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "checkpoint": str(checkpoint),
        "server": info, "beam": args.beam or info["beam"], "threads": args.threads or "the thread policy", "requests": len(bodies), "sentences": n_sent,
        "concurrency": args.concurrency, "errors": len(errors), "inconsistent": inconsistent(bodies, answers),
        "latency_ms": {"p50": percentile(ms, 50), "p95": percentile(ms, 95), "p99": percentile(ms, 99), "max": max(ms)},
        "sentences_per_s": n_sent / wall, "requests_per_s": len(bodies) / wall, "seconds": wall, "machine": machine,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(doc, indent=1))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
