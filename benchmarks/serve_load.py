"""Load test of ``syntaxnmt serve``: N requests at C concurrent against a local server, and small
requests beside one maximum request.

    python benchmarks/serve_load.py [--checkpoint PATH] [--requests 1000] [--concurrency 50]
                                    [--sentences-per-request 1] [--beam B] [--device cpu] [--threads T]
                                    [--case load|heavy|both|fair] [--heavy-clients 8] [--heavy-max-requests 2000]
                                    [--fair-levels 0,1,3,6] [--fair-seconds 60] [--server-timeout S]

Starts ``syntaxnmt serve`` in its own process on a free port of 127.0.0.1 (the checkpoint given,
or by default the demo's small Transformer trained for ``--minutes`` on the synthetic corpus in
``--dir``, trained once and reused), then sends the requests from one asyncio client (httpx),
at most C in flight, each with sentences drawn in turn from the synthetic test and dev splits.
Prints the errors (must be 0), sentences whose answers differed between requests (must be 0),
the latency of a request (p50, p95, p99, max) and the throughput in sentences/s.

The heavy case (issue 25): first the request that held a server for 12 minutes before there was a
work budget (64 sentences of 500 one-letter words, the longest ``--max-chars`` allows, at the
largest beam), which must be refused at once (413); then the heaviest request of such sentences
that the budget admits (the 413's ``work`` and ``max_work`` tell how many), and, while it runs,
``--heavy-clients`` clients sending one-sentence requests back to back (at most
``--heavy-max-requests``). Prints what the heavy request got, and the small requests' errors and
latency: their p95 must stay under 2 s.
The fair case (issue 49, ``--case fair``): for each N of ``--fair-levels``, N clients send heavy
requests back to back (issue 49's: sentences of 500 one-letter words at the largest beam, as many
as the work budget admits -- two at the default limits), and one client sends one-sentence
requests one after another, for ``--fair-seconds``; a heavy client refused with 503 waits the
Retry-After it was given (at most 5 s). Prints, per N, the small requests' p50 / p95 latency
(p95 must be <= 2 s beside 6), and what the heavy requests got: answered (their p50 seconds),
refused up front (503 with Retry-After, in under a second), and held past the server's timeout
without being refused up front (timed out with 503, or answered after the timeout: must be 0).

Also the machine (``syntaxnmt.cpu.machine.machine_info``, load average before and after); all go to ``--json``
(default benchmarks/out/serve_load.json). The server runs as the ``syntaxnmt`` command does
(passive OpenMP waiting, the thread policy unless ``--threads``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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

from syntaxnmt.cpu.machine import machine_info, machine_summary, with_load_after
from syntaxnmt.textio import atomic_write_text


def default_checkpoint(directory: Path, minutes: float, threads: int) -> Path:
    """The demo model of ``directory`` (trained for ``minutes`` the first time, validated every
    100 updates; ``last.pt`` if no validation has run)."""
    from syntaxnmt.data.prepare import prepare
    from syntaxnmt.data.synthetic import write_corpus
    from syntaxnmt.experiments.demo import demo_config
    from syntaxnmt.runtime import keep_freed_memory
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


def start_server(checkpoint: Path, port: int, device: str, threads: int, timeout: float | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "syntaxnmt", "serve", "--checkpoint", str(checkpoint), "--port", str(port), "--device", device, "--parser", "none", "--max-sentences", "64"]
    if timeout:
        cmd += ["--timeout", str(timeout)]
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


LONG_WORDS = 500
"""Words of the issue's long sentences: 500 one-letter words are 999 characters, within the default
``--max-chars`` of 1000. A model runs such a sentence to its longest output (1.5 x |x| + 10)."""


async def heavy_case(url: str, limits: dict, small: list[dict], clients: int, max_requests: int) -> dict:
    """The issue's request (must be 413), then the heaviest admitted request of its sentences
    with ``clients`` clients sending the ``small`` bodies meanwhile; the figures."""
    words = min(LONG_WORDS, (limits["max_chars"] + 1) // 2)
    sentence = " ".join(["a"] * words)
    beam = limits["max_beam"]
    timeout = httpx.Timeout(limits["timeout"] + 60)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=httpx.Limits(max_connections=clients + 2)) as client:
        t0 = time.perf_counter()
        refused = await client.post("/translate", json={"sentences": [sentence] * limits["max_sentences"], "beam": beam})
        refused_s = time.perf_counter() - t0
        if refused.status_code != 413:
            return {"issue_status": refused.status_code, "issue_seconds": refused_s}
        per_sentence = refused.json()["work"] / limits["max_sentences"]
        n = max(1, min(limits["max_sentences"], int(refused.json()["max_work"] // per_sentence)))
        heavy_body = {"sentences": [sentence] * n, "beam": beam}
        latencies: list[float] = []
        errors: list[str] = []
        heavy_done = asyncio.Event()
        sent = 0

        async def heavy() -> tuple[int, float, str]:
            t = time.perf_counter()
            try:
                r = await client.post("/translate", json=heavy_body)
                return r.status_code, time.perf_counter() - t, r.text[:200]
            finally:
                heavy_done.set()

        async def small_client(k: int) -> None:
            nonlocal sent
            while not heavy_done.is_set() and sent < max_requests:
                body = small[sent % len(small)]
                sent += 1
                t = time.perf_counter()
                try:
                    r = await client.post("/translate", json=body)
                    if r.status_code != 200:
                        errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as e:
                    errors.append(f"{type(e).__name__}: {e}")
                latencies.append(time.perf_counter() - t)

        task = asyncio.create_task(heavy())
        await asyncio.sleep(0.5)  # the heavy request is in the model before the small ones come
        await asyncio.gather(*(small_client(k) for k in range(clients)))
        status, seconds, text = await task
    return {
        "issue_status": 413, "issue_seconds": refused_s, "issue_work": refused.json()["work"], "max_work": refused.json()["max_work"],
        "words": words, "beam": beam, "n": n, "work": round(per_sentence * n), "status": status, "seconds": seconds, "text": text,
        "latencies": latencies, "errors": errors,
    }


async def fair_case(url: str, limits: dict, small: list[dict], levels: list[int], seconds: float) -> list[dict]:
    """Per number of concurrent heavy clients: the small requests' latencies and the heavy
    requests' outcomes (see the module's docstring)."""
    words = min(LONG_WORDS, (limits["max_chars"] + 1) // 2)
    sentence = " ".join(["a"] * words)
    beam, timeout = limits["max_beam"], limits["timeout"]
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(timeout + 60), limits=httpx.Limits(max_connections=max(levels) + 4)) as client:
        probe = await client.post("/translate", json={"sentences": [sentence] * limits["max_sentences"], "beam": beam})
        per_sentence = probe.json()["work"] / limits["max_sentences"] if probe.status_code == 413 else 1
        n = max(1, min(limits["max_sentences"], int(limits["max_work"] // per_sentence)))
        heavy_body = {"sentences": [sentence] * n, "beam": beam}
        for level in levels:
            stop_at = time.perf_counter() + seconds
            heavy: list[dict] = []
            latencies: list[float] = []
            errors: list[str] = []

            async def heavy_client() -> None:
                while time.perf_counter() < stop_at:
                    t = time.perf_counter()
                    r = await client.post("/translate", json=heavy_body)
                    took = time.perf_counter() - t
                    heavy.append({"status": r.status_code, "seconds": took, "retry_after": r.headers.get("retry-after")})
                    if r.status_code == 503 and r.headers.get("retry-after"):
                        await asyncio.sleep(min(5.0, float(r.headers["retry-after"]), max(0.0, stop_at - time.perf_counter())))

            async def small_client() -> None:
                await asyncio.sleep(1.0 if level else 0.0)  # the heavy requests are in first
                k = 0
                while time.perf_counter() < stop_at:
                    t = time.perf_counter()
                    try:
                        r = await client.post("/translate", json=small[k % len(small)])
                        if r.status_code != 200:
                            errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    except httpx.HTTPError as e:
                        errors.append(f"{type(e).__name__}: {e}")
                    latencies.append(time.perf_counter() - t)
                    k += 1
                    await asyncio.sleep(0.1)

            await asyncio.gather(small_client(), *(heavy_client() for _ in range(level)))
            out.append({"heavy_clients": level, "heavy_sentences": n, "words": words, "beam": beam, "timeout": timeout, "small_latencies": latencies, "small_errors": errors, "heavy": heavy})
    return out


def print_fair(levels: list[dict]) -> bool:
    """Print the fair case's figures; True if it passed (small p95 <= 2 s beside every level, no
    small request failed, no heavy request held past the timeout without a refusal up front)."""
    ok = True
    for lv in levels:
        ms = [x * 1000 for x in lv["small_latencies"]]
        heavy = lv["heavy"]
        answered = [h["seconds"] for h in heavy if h["status"] == 200]
        up_front = [h for h in heavy if h["status"] == 503 and h["retry_after"] and h["seconds"] < 1.0]
        held = [h for h in heavy if h["seconds"] > lv["timeout"] or (h["status"] == 503 and not h["retry_after"])]
        other = len(heavy) - len(answered) - len(up_front) - len([h for h in held if h["status"] != 200])
        p95 = percentile(ms, 95) if ms else math.inf
        ok &= bool(ms) and p95 <= 2000 and not lv["small_errors"] and not held
        small = f"small: {len(ms)} requests, p50 {percentile(ms, 50):.0f} ms, p95 {p95:.0f} ms" if ms else "small: none finished"
        print(
            f"{lv['heavy_clients']} heavy clients ({lv['heavy_sentences']} x {lv['words']} words, beam {lv['beam']}): {small}, errors {len(lv['small_errors'])}"
            + (f" (first: {lv['small_errors'][0]})" if lv["small_errors"] else "")
            + f"; heavy: {len(answered)} answered" + (f" (p50 {statistics.median(answered):.1f} s, max {max(answered):.1f} s)" if answered else "")
            + f", {len(up_front)} refused up front, {len(held)} held past the {lv['timeout']:g} s timeout (must be 0)" + (f", {other} other" if other else "")
        )
    return ok


def print_heavy(h: dict, clients: int) -> bool:
    """Print the heavy case's figures; True if it passed (413 at once, no small request failed, p95 < 2 s)."""
    print(f"heavy case: the issue's request (64 x {h.get('words', LONG_WORDS)} words, beam {h.get('beam', '?')}): HTTP {h['issue_status']} in {h['issue_seconds'] * 1000:.0f} ms" + (f", work {h['issue_work']} > budget {h['max_work']}" if "issue_work" in h else ""))
    if h["issue_status"] != 413:
        return False
    print(f"heavy request: {h['n']} x {h['words']} words, beam {h['beam']}, work {h['work']} (budget {h['max_work']}): HTTP {h['status']} after {h['seconds']:.1f} s" + ("" if h["status"] == 200 else f" ({h['text']})"))
    ms = [x * 1000 for x in h["latencies"]]
    if not ms:
        print("small requests beside it: none finished")
        return False
    p95 = percentile(ms, 95)
    print(f"small requests beside it: {len(ms)} one-sentence requests from {clients} clients, errors {len(h['errors'])}" + (f" (first: {h['errors'][0]})" if h["errors"] else ""))
    print(f"small latency ms: p50 {percentile(ms, 50):.0f}, p95 {p95:.0f}, max {max(ms):.0f} (p95 must be < 2000: {'yes' if p95 < 2000 else 'NO'})")
    return not h["errors"] and p95 < 2000


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
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the server and of training the default model (0: torch's default)")
    ap.add_argument("--case", choices=["load", "heavy", "both", "fair"], default="both", help="the load test, the heavy-request case, or both (default); fair: small requests beside 0, 1, 3, 6 concurrent heavy ones (issue 49)")
    ap.add_argument("--fair-levels", default="0,1,3,6", help="the fair case's numbers of concurrent heavy clients (default: 0,1,3,6)")
    ap.add_argument("--fair-seconds", type=float, default=60.0, help="seconds of the fair case per number of heavy clients (default: 60)")
    ap.add_argument("--server-timeout", type=float, help="the server's --timeout (default: its own, 60 s)")
    ap.add_argument("--heavy-clients", type=int, default=8, help="clients sending one-sentence requests beside the heavy request")
    ap.add_argument("--heavy-max-requests", type=int, default=2000, help="at most this many small requests in the heavy case")
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
    proc = start_server(checkpoint, port, args.device, args.threads, args.server_timeout)
    heavy = fair = None
    try:
        info = wait_ready(url, proc)
        asyncio.run(load(url, bodies[: min(20, len(bodies))], 5))  # warm-up
        if args.case in ("load", "both"):
            before = httpx.get(f"{url}/health").json()["served"]
            latencies, errors, answers, wall = asyncio.run(load(url, bodies, args.concurrency))
            after = httpx.get(f"{url}/health").json()["served"]
        if args.case in ("heavy", "both"):
            small = [{"sentences": [s], **({"beam": args.beam} if args.beam else {})} for s in pool]
            heavy = asyncio.run(heavy_case(url, info["limits"], small, args.heavy_clients, args.heavy_max_requests))
            served = httpx.get(f"{url}/health").json()["served"]
        if args.case == "fair":
            small = [{"sentences": [s], **({"beam": args.beam} if args.beam else {})} for s in pool]
            fair = asyncio.run(fair_case(url, info["limits"], small, [int(x) for x in args.fair_levels.split(",")], args.fair_seconds))
    finally:
        proc.terminate()
        proc.wait(30)
    with_load_after(machine)

    print(f"server: {checkpoint} on {info['device']} ({info['arch']}, {info['encoder_layers']}+{info['decoder_layers']} layers), beam {args.beam or info['beam']}, threads {args.threads or 'default'}")
    server_threads = args.threads or "the thread policy's"
    print(machine_summary(machine) + f" (this script's; the server runs as `python -m syntaxnmt serve`, with the command's OpenMP defaults and {server_threads} threads)")
    ok = True
    if fair is not None:
        ok = print_fair(fair)
        doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "checkpoint": str(checkpoint), "server": info, "fair": fair, "machine": machine}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(doc, indent=1))
        sys.exit(0 if ok else 1)
    if heavy is not None:
        ok = print_heavy(heavy, args.heavy_clients)
        print(f"server after the heavy case: {served}")
    if args.case == "heavy":
        sys.exit(0 if ok else 1)
    n_sent = sum(len(b["sentences"]) for b in bodies)
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
    sys.exit(1 if errors or not ok else 0)


if __name__ == "__main__":
    from syntaxnmt.runtime import run_command

    run_command(main)
