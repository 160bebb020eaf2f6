"""Streaming through the whole pipeline (API -> NATS -> worker -> NATS -> API -> SSE)
against a baseline that streams the same tokens from the same API process without NATS.

The worker runs the SYNTHETIC token source (benchmarks/synthetic_engine.py), so this
measures the serving path alone. Prints delivered token deltas per second and time to
first event (p50/p99) at 1, 16 and 64 concurrent streams, and the ratio to the baseline.

    .venv/bin/python benchmarks/bench_stream.py [--tokens 128] [--streams 1 16 64] [--timeout 600]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.synthetic_engine import SYNTHETIC_MODEL  # noqa: E402
from cli.nats_server import EmbeddedNats, free_port  # noqa: E402


@dataclass
class StreamResult:
    first_event_s: float
    first_token_s: float
    deltas: int


async def one_stream(client: httpx.AsyncClient, url: str, tokens: int) -> StreamResult:
    body = {"model": SYNTHETIC_MODEL, "input": "benchmark prompt", "stream": True,
            "max_output_tokens": tokens}
    started = time.perf_counter()
    first_event = first_token = None
    deltas = 0
    async with client.stream("POST", url, json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("event:"):
                continue
            now = time.perf_counter() - started
            if first_event is None:
                first_event = now
            if line == "event: response.output_text.delta":
                deltas += 1
                if first_token is None:
                    first_token = now
    return StreamResult(first_event or 0.0, first_token or 0.0, deltas)


async def run_level(url: str, streams: int, tokens: int, timeout: float = 600) -> dict[str, float]:
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, tokens) for _ in range(streams)))
        wall = time.perf_counter() - started
    first = sorted(result.first_event_s for result in results)
    first_token = sorted(result.first_token_s for result in results)
    delivered = sum(result.deltas for result in results)
    if delivered != streams * tokens:
        raise RuntimeError(f"expected {streams * tokens} deltas, got {delivered}")
    return {
        "deltas_per_s": delivered / wall,
        "ttfe_p50_ms": 1000 * statistics.median(first),
        "ttfe_p99_ms": 1000 * first[min(len(first) - 1, int(0.99 * len(first)))],
        "ttft_p50_ms": 1000 * statistics.median(first_token),
    }


def wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--step-interval", type=float, default=0.01,
                        help="seconds per synthetic decode step (both paths)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds a stream may take before the run fails")
    args = parser.parse_args(argv)
    rows: list[dict[str, float]] = []

    port = free_port()
    env = {**os.environ, "SPATE_BENCH_STEP_INTERVAL_S": str(args.step_interval),
           "SPATE_LOG_LEVEL": "WARNING"}
    with EmbeddedNats() as nats:
        env["SPATE_NATS_URL"] = nats.url
        processes = [
            subprocess.Popen([sys.executable, str(ROOT / "benchmarks/synthetic_worker.py")], env=env),
            subprocess.Popen([sys.executable, str(ROOT / "benchmarks/bench_api.py"), str(port)], env=env),
        ]
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(f"{base}/ready")
            asyncio.run(run_level(f"{base}/v1/responses", 2, 8, args.timeout))  # warm both paths
            asyncio.run(run_level(f"{base}/bench/direct", 2, 8, args.timeout))
            print(f"{args.tokens} tokens per stream, synthetic step every {args.step_interval * 1000:.0f} ms")
            header = (f"{'streams':>7} | {'path':<8} | {'deltas/s':>9} | {'TTFE p50':>9} | "
                      f"{'TTFE p99':>9} | {'TTFT p50':>9} | {'ratio':>5}")
            print(header)
            print("-" * len(header))
            for streams in args.streams:
                spate = asyncio.run(run_level(f"{base}/v1/responses", streams, args.tokens, args.timeout))
                direct = asyncio.run(run_level(f"{base}/bench/direct", streams, args.tokens, args.timeout))
                for name, row in (("spate", spate), ("baseline", direct)):
                    ratio = row["deltas_per_s"] / direct["deltas_per_s"]
                    rows.append({"streams": streams, "spate": name == "spate", "ratio": ratio, **row})
                    print(f"{streams:>7} | {name:<8} | {row['deltas_per_s']:>9.0f} | "
                          f"{row['ttfe_p50_ms']:>7.1f}ms | {row['ttfe_p99_ms']:>7.1f}ms | "
                          f"{row['ttft_p50_ms']:>7.1f}ms | {ratio:>5.2f}")
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
    return rows


if __name__ == "__main__":
    main()
