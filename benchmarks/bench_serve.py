"""The real model served end to end, as `make serve` runs it: `spate serve` (embedded NATS,
one worker, the API) on this machine, with N concurrent SSE clients each streaming
greedy tokens. Prints delivered deltas per second in total, each stream's decode rate
and time to first token.

It compares the worker's decode threads: `spate serve`'s default (every core but one,
left to the API, NATS and clients) against every core; prefill uses every core in both.
The two alternate round by round, so a drift in the machine's speed hits both alike.

    .venv/bin/python benchmarks/bench_serve.py [--streams 1 8 32] [--tokens 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import free_port  # noqa: E402
from workers.model.host import usable_cpu_count  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"


def start_serve(port: int, num_threads: int | None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    if num_threads is not None:
        command += ["--num-threads", str(num_threads)]
    env = {key: value for key, value in os.environ.items() if key != "SPATE_NUM_THREADS"}
    server = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop(server)
    raise RuntimeError("spate serve did not become ready")


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def one_stream(port: int, index: int, tokens: int) -> tuple[int, float, float]:
    """(deltas, seconds to the first delta, seconds from the first delta to the end)."""
    body = {
        "model": MODEL,
        "input": f"Write a long essay ({index}) about the sea.",
        "max_output_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    started = time.perf_counter()
    first = None
    deltas = 0
    url = f"http://127.0.0.1:{port}/v1/responses"
    with httpx.stream("POST", url, json=body, timeout=600) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("data:") and '"response.output_text.delta"' in line:
                deltas += 1
                if first is None:
                    first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"stream {index} delivered no text")
    return deltas, first - started, time.perf_counter() - first


def measure(port: int, streams: int, tokens: int) -> tuple[float, float, float]:
    """(deltas/s in total, median per-stream decode rate, median TTFT in ms)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda index: one_stream(port, index, tokens), range(streams)))
    elapsed = time.perf_counter() - started
    total = sum(deltas for deltas, _, _ in results) / elapsed
    decode = statistics.median((deltas - 1) / span for deltas, _, span in results if span > 0)
    ttft = statistics.median(first for _, first, _ in results) * 1000
    return total, decode, ttft


def main(argv: list[str] | None = None) -> dict[tuple[str, int], list[tuple[float, float, float]]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    cores = usable_cpu_count()
    default_threads = max(1, cores - 1)
    configs = {
        f"default ({default_threads} thread{'s' if default_threads > 1 else ''})": None,
        f"every core ({cores} thread{'s' if cores > 1 else ''})": cores,
    }
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for name, num_threads in configs.items():
            port = free_port()
            server = start_serve(port, num_threads)
            try:
                one_stream(port, 0, 8)  # warm up
                for streams in args.streams:
                    results.setdefault((name, streams), []).append(
                        measure(port, streams, args.tokens)
                    )
            finally:
                stop(server)
    print(
        f"{MODEL}, {args.tokens} tokens per stream, {cores} cores, median of {args.rounds} rounds"
    )
    print("| worker decode threads | streams | deltas/s total | per-stream decode/s | TTFT p50 |")
    print("|---|---|---|---|---|")
    for streams in args.streams:
        for name in configs:
            runs = results[(name, streams)]
            total = statistics.median(run[0] for run in runs)
            decode = statistics.median(run[1] for run in runs)
            ttft = statistics.median(run[2] for run in runs)
            print(f"| {name} | {streams} | {total:.1f} | {decode:.1f} | {ttft:.0f} ms |")
    return results


if __name__ == "__main__":
    main()
