"""One key floods, the others are measured: their time to first token while it floods,
against their own idle time in the same run.

Real processes on loopback: nats-server, redis-server (the store: background responses
need it), the API with N keys and a worker with the default model. First each measured
key sends `--rounds` streaming requests one after another on an idle server (the
baseline); then key 0 sends `--flood` background requests at once and, once they are
all accepted, the measured keys send their rounds again, concurrently. The worker's
scheduler shares its batch between owners, so the flood's depth should not reach the
others' first token. Every loop is bounded; the flood is cancelled at the end.

    .venv/bin/python benchmarks/bench_tenants.py [--keys 3] [--flood 200] [--rounds 10]
        [--tokens 16] [--flood-tokens 64] [--max-num-seqs 16] [--max-waiting N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import EmbeddedNats, free_port  # noqa: E402
from cli.redis_server import EmbeddedRedis  # noqa: E402
from tests.processes import SpateProcess, wait_http  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
PROMPT = "Write one sentence about the sea."
FLOOD_PROMPT = "Write a long story about a lighthouse keeper."
# Seconds the model may take to load on a busy machine.
LOAD_TIMEOUT_S = 600


def key(index: int) -> str:
    return f"tenant-key-{index}"


def headers(index: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {key(index)}"}


async def first_token_s(client: httpx.AsyncClient, base: str, index: int, tokens: int) -> float:
    """Seconds from the POST to the first text delta of one streamed response."""
    body = {"model": MODEL, "input": PROMPT, "max_output_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}
    started = time.perf_counter()
    first = None
    async with client.stream("POST", f"{base}/v1/responses", json=body,
                             headers=headers(index)) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if first is None and line.startswith("data: {") and \
                    json.loads(line[5:])["type"] == "response.output_text.delta":
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"key {index}: a stream ended without a text delta")
    return first


async def measure(base: str, keys: range, rounds: int, tokens: int) -> list[float]:
    """Each key's `rounds` requests one after another, the keys side by side."""
    async with httpx.AsyncClient(timeout=600) as client:
        async def one_key(index: int) -> list[float]:
            return [await first_token_s(client, base, index, tokens) for _ in range(rounds)]

        per_key = await asyncio.gather(*(one_key(index) for index in keys))
    return [value for values in per_key for value in values]


async def flood(base: str, count: int, tokens: int) -> tuple[list[str], int]:
    """Key 0's background requests, all at once: the ids accepted and the count refused."""
    body = {"model": MODEL, "input": FLOOD_PROMPT, "max_output_tokens": tokens,
            "ignore_eos": True, "background": True}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        replies = await asyncio.gather(*(
            client.post(f"{base}/v1/responses", json=body, headers=headers(0))
            for _ in range(count)))
    accepted = [reply.json()["id"] for reply in replies if reply.status_code == 200]
    return accepted, sum(reply.status_code == 429 for reply in replies)


async def statuses(base: str, response_ids: list[str]) -> list[str]:
    limits = httpx.Limits(max_connections=16)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        replies = await asyncio.gather(*(
            client.get(f"{base}/v1/responses/{response_id}", headers=headers(0))
            for response_id in response_ids))
    return [reply.json().get("status", "missing") for reply in replies]


def wait_taken(base: str, response_ids: list[str], timeout: float = 300) -> None:
    """Until the worker holds every flood request (none is still queued)."""
    deadline = time.monotonic() + timeout
    while "queued" in asyncio.run(statuses(base, response_ids)):
        if time.monotonic() > deadline:
            raise TimeoutError("the worker did not take the flood")
        time.sleep(0.5)


async def cancel_all(base: str, response_ids: list[str]) -> None:
    limits = httpx.Limits(max_connections=16)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(
            client.post(f"{base}/v1/responses/{response_id}/cancel", headers=headers(0))
            for response_id in response_ids), return_exceptions=True)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=3, help="API keys; key 0 floods")
    parser.add_argument("--flood", type=int, default=200, help="key 0's background requests")
    parser.add_argument("--rounds", type=int, default=10, help="requests per measured key")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per measured request")
    parser.add_argument("--flood-tokens", type=int, default=64, help="tokens per flood request")
    parser.add_argument("--max-num-seqs", type=int, default=16, help="the worker's batch")
    parser.add_argument("--max-waiting", type=int, default=None,
                        help="SPATE_MAX_WAITING (default: the flood and one a measured key); "
                             "0 leaves the flood's backlog in the queue, first come first served")
    args = parser.parse_args(argv)
    if args.keys < 2:
        parser.error("--keys needs one key to flood and one to measure")
    measured = range(1, args.keys)
    max_waiting = args.flood + args.keys if args.max_waiting is None else args.max_waiting
    with EmbeddedNats() as nats, EmbeddedRedis() as redis:
        port = free_port()
        env = {"SPATE_NATS_URL": nats.url, "SPATE_STORE_URL": redis.url,
               "SPATE_API_KEYS": ",".join(key(index) for index in range(args.keys)),
               "SPATE_KEY_MAX_BACKGROUND": str(args.flood),
               "SPATE_KEY_MAX_OPEN": str(args.flood), "SPATE_LOG_LEVEL": "WARNING"}
        api = SpateProcess(["api", "--port", str(port)], env, "tenants-api")
        worker = SpateProcess(
            ["worker", "--model", MODEL, "--max-num-seqs", str(args.max_num_seqs)],
            {**env, "SPATE_MAX_WAITING": str(max_waiting)}, "tenants-worker")
        base = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base}/ready", worker, timeout=LOAD_TIMEOUT_S)
            asyncio.run(measure(base, measured, 1, args.tokens))  # warm-up, not counted
            idle = asyncio.run(measure(base, measured, args.rounds, args.tokens))
            accepted, refused = asyncio.run(flood(base, args.flood, args.flood_tokens))
            try:
                if max_waiting >= len(accepted):
                    wait_taken(base, accepted)
                loaded = asyncio.run(measure(base, measured, args.rounds, args.tokens))
                ended = ("completed", "incomplete", "failed", "cancelled")
                left = sum(status not in ended for status in asyncio.run(statuses(base, accepted)))
            finally:
                asyncio.run(cancel_all(base, accepted))
        finally:
            worker.stop()
            api.stop()
    row = {
        "keys": args.keys, "flood_accepted": len(accepted), "flood_refused": refused,
        "flood_left_after": left,
        "idle_p50_s": statistics.median(idle), "idle_p99_s": p99(idle),
        "flood_p50_s": statistics.median(loaded), "flood_p99_s": p99(loaded),
    }
    row["p99_ratio"] = row["flood_p99_s"] / row["idle_p99_s"]
    print(f"{args.keys - 1} measured keys x {args.rounds} rounds, key 0 flooding with "
          f"{len(accepted)} background requests ({refused} refused): time to first token "
          f"p50 {row['idle_p50_s']:.3f}s -> {row['flood_p50_s']:.3f}s, "
          f"p99 {row['idle_p99_s']:.3f}s -> {row['flood_p99_s']:.3f}s "
          f"({row['p99_ratio']:.2f}x idle; {left} flood requests still unfinished after)",
          flush=True)
    return row


if __name__ == "__main__":
    # A SIGTERM still stops the processes the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
