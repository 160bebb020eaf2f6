"""The response store under load, in one run against a real nats-server, a real
redis-server and the API with the store on:

(a) projection lag under N concurrent streams: for every SSE event, the time from the
    client receiving it to the store announcing it on the response's notify channel
    (published by the same Lua script that writes it, so it is visible by then);
(b) GET /v1/responses/{id} latency over the stored responses;
(c) Redis memory per stored response (INFO used_memory delta over the count), against
    the size of its final Response JSON (the target: at most 3x);
(d) time to first token of turn 2 of a previous_response_id chain against turn 1,
    with the real default model (turn 2's prompt starts with turn 1's: prefix cache).

(a)-(c) run on the SYNTHETIC token source (benchmarks/synthetic_engine.py), so they
measure the serving and storing path alone; (d) on the real model.

    .venv/bin/python benchmarks/bench_store.py [--streams 64] [--tokens 128] [--no-model] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.synthetic_engine import SYNTHETIC_MODEL  # noqa: E402
from cli.child_process import terminate  # noqa: E402
from cli.nats_server import EmbeddedNats, free_port  # noqa: E402
from cli.redis_server import EmbeddedRedis  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
NOTIFY_PATTERN = "spate:response:*:notify"
# No phase of the run may hang it: a stream that never ends fails it instead.
PHASE_TIMEOUT_S = 300.0
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
STORY = ("The lighthouse keeper wrote in his log every evening: the wind, the ships that "
         "passed, the colour of the sea and what the gulls were doing. ") * 12


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Child:
    """A process this benchmark started, its output in a file, stopped by its pid."""

    def __init__(self, command: list[str], env: dict[str, str], name: str) -> None:
        self.log = Path(tempfile.mkdtemp(prefix=f"bench-store-{name}-")) / "output.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                            stderr=subprocess.STDOUT)

    def stop(self) -> None:
        terminate(self.process, timeout=30)


def wait_model(base_url: str, model: str, child: Child, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process.poll() is not None:
            raise RuntimeError(f"{child.log} exited:\n{child.log.read_text()[-3000:]}")
        try:
            reply = httpx.get(f"{base_url}/ready", timeout=1)
            if reply.status_code == 200 and model in reply.json()["models"]:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{model} not ready at {base_url}")


class Visibility:
    """When each response's SSE events became visible in Redis, from its notify channel."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)

    async def watch(self, client: redis.asyncio.Redis, ready: asyncio.Event) -> None:
        pubsub = client.pubsub()
        await pubsub.psubscribe(NOTIFY_PATTERN)
        ready.set()
        try:
            async for message in pubsub.listen():
                if message["type"] != "pmessage":
                    continue
                now = time.perf_counter()
                channel = message["channel"].decode()
                response_id = channel[channel.index("{") + 1:channel.index("}")]
                seen = self.at[response_id]
                seen.extend([now] * (int(message["data"]) + 1 - len(seen)))
        finally:
            await pubsub.aclose()


async def stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[str, list[float], dict]:
    """(response id, receive time of each SSE event by sequence_number, the last event)."""
    received: list[float] = []
    event: dict[str, Any] = {}
    async with client.stream("POST", url, json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: {"):
                received.append(time.perf_counter())
                event = json.loads(line[5:])
                if event["sequence_number"] == 0:
                    response_id = event["response"]["id"]
    return response_id, received, event


async def wait_sealed(client: redis.asyncio.Redis, response_ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    for response_id in response_ids:
        while not await client.hexists(f"spate:response:{{{response_id}}}", "sealed"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{response_id} was never sealed")
            await asyncio.sleep(0.05)


async def store_path(base_url: str, redis_url: str, streams: int, tokens: int, gets: int) -> dict[str, float]:
    """(a), (b) and (c) on the synthetic token source."""
    url = f"{base_url}/v1/responses"
    body = {"model": SYNTHETIC_MODEL, "input": "benchmark prompt", "max_output_tokens": tokens}
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    watcher_client = redis.asyncio.Redis.from_url(redis_url)
    visibility = Visibility()
    subscribed = asyncio.Event()
    watcher = asyncio.create_task(visibility.watch(watcher_client, subscribed))
    try:
        await subscribed.wait()
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            await asyncio.wait_for(  # warm up
                asyncio.gather(*(stream(client, url, body) for _ in range(2))), PHASE_TIMEOUT_S)
            await asyncio.sleep(0.5)
            before = (await watcher_client.info("memory"))["used_memory"]
            results = await asyncio.wait_for(
                asyncio.gather(*(stream(client, url, body) for _ in range(streams))), PHASE_TIMEOUT_S)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    len(visibility.at[rid]) < len(received) for rid, received, _ in results):
                await asyncio.sleep(0.05)
            lags = [1000 * (visible - received_at)
                    for rid, received, _ in results
                    for received_at, visible in zip(received, visibility.at[rid], strict=False)]
            missing = sum(len(received) - len(visibility.at[rid]) for rid, received, _ in results)
            if missing:
                raise RuntimeError(f"{missing} streamed events never became visible in Redis")
            # An ended response is sealed (its snapshot and SSE events packed) just after its last
            # event is visible: measured once every response is.
            await wait_sealed(watcher_client, [rid for rid, _, _ in results])
            after = (await watcher_client.info("memory"))["used_memory"]
            # What the keys themselves take (MEMORY USAGE), without the allocator's and
            # the connections' share that used_memory counts too; over every response
            # stored (the warm-up's too).
            keys_bytes = 0
            async for key in watcher_client.scan_iter(count=1000):
                keys_bytes += await watcher_client.memory_usage(key) or 0
            latencies = []
            for index in range(gets):
                rid = results[index % len(results)][0]
                started = time.perf_counter()
                reply = await client.get(f"{base_url}/v1/responses/{rid}")
                latencies.append(1000 * (time.perf_counter() - started))
                if reply.status_code != 200 or reply.json()["status"] not in ("completed", "incomplete"):
                    raise RuntimeError(f"GET {rid}: {reply.status_code} {reply.text[:200]}")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await watcher_client.aclose()
    return {
        "events": len(lags),
        "lag_p50_ms": statistics.median(lags), "lag_p99_ms": percentile(lags, 0.99),
        "get_p50_ms": statistics.median(latencies), "get_p99_ms": percentile(latencies, 0.99),
        "bytes_per_response": (after - before) / streams,
        "key_bytes_per_response": keys_bytes / (streams + 2),
        "final_json_bytes": statistics.mean(
            len(json.dumps(last["response"], separators=(",", ":"))) for _, _, last in results),
        "sse_events_per_response": len(lags) / streams,
    }


async def first_token(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[str, float, dict]:
    started = time.perf_counter()
    ttft = 0.0
    response: dict[str, Any] = {}
    async with client.stream("POST", url, json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[5:])
            if event["type"] == "response.output_text.delta" and not ttft:
                ttft = 1000 * (time.perf_counter() - started)
            if event["type"] in TERMINAL:
                response = event["response"]
    return response["id"], ttft, response


async def wait_stored(client: httpx.AsyncClient, base_url: str, response_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = await client.get(f"{base_url}/v1/responses/{response_id}")
        if reply.status_code == 200 and reply.json()["status"] in ("completed", "incomplete"):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{response_id} not stored")


async def multi_turn(base_url: str, chains: int, turn_tokens: int) -> dict[str, float]:
    """(d): turn 1 and turn 2 (previous_response_id) time to first token, real model."""
    url = f"{base_url}/v1/responses"
    common = {"model": MODEL, "temperature": 0, "max_output_tokens": turn_tokens}
    rows: list[tuple[float, float, int, int]] = []
    async with httpx.AsyncClient(timeout=600) as client:
        await first_token(client, url, {**common, "input": "Say hello."})  # warm up
        for chain in range(chains):
            first_id, turn1_ms, _ = await first_token(
                client, url, {**common, "input": f"Log {chain}. {STORY} What did he write about?"})
            await wait_stored(client, base_url, first_id)
            _, turn2_ms, second = await first_token(
                client, url, {**common, "input": "Say it in one sentence.",
                              "previous_response_id": first_id})
            usage = second["usage"]
            rows.append((turn1_ms, turn2_ms, usage["input_tokens"],
                         usage["input_tokens_details"]["cached_tokens"]))
    return {
        "turn1_ttft_ms": statistics.median(row[0] for row in rows),
        "turn2_ttft_ms": statistics.median(row[1] for row in rows),
        "turn2_input_tokens": statistics.median(row[2] for row in rows),
        "turn2_cached_tokens": statistics.median(row[3] for row in rows),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams for (a)")
    parser.add_argument("--tokens", type=int, default=128, help="synthetic tokens per stream")
    parser.add_argument("--gets", type=int, default=256, help="GET requests for (b)")
    parser.add_argument("--chains", type=int, default=3, help="two-turn chains for (d)")
    parser.add_argument("--turn-tokens", type=int, default=16, help="tokens per turn in (d)")
    parser.add_argument("--step-interval", type=float, default=0.01,
                        help="seconds per synthetic decode step")
    parser.add_argument("--projector", choices=("process", "api"), default="process",
                        help="project in a `spate store` process of its own (the API's "
                             "projector off), or in the API process")
    parser.add_argument("--no-model", action="store_true",
                        help="(a)-(c) only: no real model, no (d)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds not minutes")
    args = parser.parse_args(argv)
    if args.smoke:
        args.streams, args.tokens, args.gets, args.chains, args.turn_tokens = 4, 8, 8, 1, 4

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SPATE_LOG_LEVEL": "WARNING",
           "SPATE_BENCH_STEP_INTERVAL_S": str(args.step_interval)}
    with EmbeddedNats() as nats, EmbeddedRedis() as store:
        env.update(SPATE_NATS_URL=nats.url, SPATE_STORE_URL=store.url)
        if args.projector == "process":
            env["SPATE_STORE_PROJECTOR"] = "false"
        api = Child([sys.executable, "-m", "cli.main", "api", "--port", str(port)], env, "api")
        children = [api]
        try:
            if args.projector == "process":
                children.append(Child([sys.executable, "-m", "cli.main", "store"], env, "store"))
            synthetic = Child([sys.executable, str(ROOT / "benchmarks/synthetic_worker.py")], env,
                              "synthetic-worker")
            children.append(synthetic)
            wait_model(base_url, SYNTHETIC_MODEL, synthetic, timeout=60)
            figures = asyncio.run(store_path(base_url, store.url, args.streams, args.tokens, args.gets))
            synthetic.stop()  # leave the cores to the real model
            if args.no_model:
                report(args, figures)
                return figures
            worker = Child([sys.executable, "-m", "cli.main", "worker", "--model", MODEL], env, "worker")
            children.append(worker)
            wait_model(base_url, MODEL, worker, timeout=600)
            figures |= asyncio.run(multi_turn(base_url, args.chains, args.turn_tokens))
        finally:
            for child in children:
                child.stop()
    report(args, figures)
    return figures


def report(args: argparse.Namespace, figures: dict[str, float]) -> None:
    print(f"(a)-(c): SYNTHETIC token source, {args.streams} concurrent streams of {args.tokens} "
          f"tokens, a step every {args.step_interval * 1000:.0f} ms, projector in "
          f"{'its own process' if args.projector == 'process' else 'the API process'}; (d): {MODEL}, "
          f"{args.chains} two-turn chains, {args.turn_tokens} tokens a turn")
    rows = [
        ("projection lag p50 (client receives -> visible in Redis)", f"{figures['lag_p50_ms']:.1f} ms"),
        ("projection lag p99", f"{figures['lag_p99_ms']:.1f} ms"),
        ("events measured", f"{figures['events']:.0f}"),
        ("GET /v1/responses/{id} p50", f"{figures['get_p50_ms']:.2f} ms"),
        ("GET /v1/responses/{id} p99", f"{figures['get_p99_ms']:.2f} ms"),
        ("Redis memory per stored response", f"{figures['bytes_per_response'] / 1024:.1f} KiB "
                                              f"({figures['sse_events_per_response']:.0f} SSE events)"),
        ("its keys' MEMORY USAGE per stored response", f"{figures['key_bytes_per_response'] / 1024:.1f} KiB"),
        ("its final Response JSON", f"{figures['final_json_bytes'] / 1024:.1f} KiB"),
        ("keys / final JSON (target <= 3)",
         f"{figures['key_bytes_per_response'] / figures['final_json_bytes']:.2f}"),
    ]
    if "turn1_ttft_ms" in figures:
        rows += [
            ("turn 1 time to first token", f"{figures['turn1_ttft_ms']:.0f} ms"),
            ("turn 2 time to first token (previous_response_id)", f"{figures['turn2_ttft_ms']:.0f} ms"),
            ("turn 2 / turn 1", f"{figures['turn2_ttft_ms'] / figures['turn1_ttft_ms']:.2f}"),
            ("turn 2 input tokens, of them cached", f"{figures['turn2_input_tokens']:.0f}, "
                                                 f"{figures['turn2_cached_tokens']:.0f}"),
        ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}} | value")
    print("-" * (width + 20))
    for name, value in rows:
        print(f"{name:<{width}} | {value}")


if __name__ == "__main__":
    # A SIGTERM runs the cleanup too: every process this run started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
