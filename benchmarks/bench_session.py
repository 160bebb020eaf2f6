"""An agent session's end-to-end time over HTTP and over WebSocket mode: N turns, each a
forced tool call whose result the next turn sends back.

Real processes: nats-server, redis-server (the store, which HTTP chains need), the API
and one worker with the default model. Three ways to run the session: POSTs with
`previous_response_id` on a kept-alive connection (`store: true`, the chain read back
from the store); POSTs that resend the whole history (`store: false`); `response.create`
events on one WebSocket with `previous_response_id` (`store: false`, the chain held by
the connection). All are greedy and send the same items, so the model does the same
work; each session has its own `cache_salt`, so none reuses another's cached prefix.
Prints each way's time and the socket's ratios.

    .venv/bin/python benchmarks/bench_session.py [--turns 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import EmbeddedNats, free_port  # noqa: E402
from cli.redis_server import EmbeddedRedis  # noqa: E402
from tests.processes import SpateProcess, wait_http  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
TOOL = {"type": "function", "name": "read_file", "description": "Read a file of the project.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"], "additionalProperties": False}, "strict": True}
TASK = "Find where the retry limit is set: read the project's files one at a time."
TURN = {"model": MODEL, "tools": [TOOL], "tool_choice": "required", "temperature": 0,
        "parallel_tool_calls": False, "max_output_tokens": 64}


@contextmanager
def stack() -> Iterator[str]:
    """nats-server, redis-server, the API (store on) and a worker; yields the API's URL."""
    with EmbeddedNats() as nats, EmbeddedRedis() as redis:
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        env = {"SPATE_NATS_URL": nats.url, "SPATE_STORE_URL": redis.url}
        api = SpateProcess(["api", "--port", str(port)], env, "session-api")
        worker = SpateProcess(["worker", "--model", MODEL], env, "session-worker")
        try:
            wait_http(f"{base_url}/ready", worker, timeout=900)
            yield base_url
        finally:
            worker.stop()
            api.stop()


def call_output(response: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    """The next turn's input: the result of the response's tool call (one cut short by
    the token cap still names a file: the session goes on as an agent's would)."""
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    if response["status"] == "failed" or not calls:
        raise RuntimeError(f"turn {turn} made no tool call: {json.dumps(response)[:400]}")
    return [{"type": "function_call_output", "call_id": call["call_id"],
             "output": json.dumps({"turn": turn, "lines": ["retries = 3", "# nothing else"]})}
            for call in calls]


def http_session(base_url: str, turns: int, salt: str) -> float:
    """The session as POSTs with previous_response_id (store on); its seconds."""
    with httpx.Client(base_url=base_url, timeout=600) as client:
        started = time.perf_counter()
        previous, items = None, [{"role": "user", "content": TASK}]
        for turn in range(turns):
            reply = client.post("/v1/responses", json={
                **TURN, "input": items, "previous_response_id": previous, "store": True,
                "cache_salt": salt})
            reply.raise_for_status()
            response = reply.json()
            previous, items = response["id"], call_output(response, turn)
        return time.perf_counter() - started


def resent_session(base_url: str, turns: int, salt: str) -> float:
    """The session as POSTs that each send the whole history again (store off, what a
    client without chaining does); its seconds."""
    with httpx.Client(base_url=base_url, timeout=600) as client:
        started = time.perf_counter()
        history: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
        for turn in range(turns):
            reply = client.post("/v1/responses", json={
                **TURN, "input": history, "store": False, "cache_salt": salt})
            reply.raise_for_status()
            response = reply.json()
            history += [*response["output"], *call_output(response, turn)]
        return time.perf_counter() - started


async def terminal(socket: ClientConnection) -> dict[str, Any]:
    while True:
        event = json.loads(await socket.recv())
        if event["type"] == "error":
            raise RuntimeError(f"the socket answered an error: {event}")
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            response: dict[str, Any] = event["response"]
            return response


async def socket_session(base_url: str, turns: int, salt: str) -> float:
    """The session as creates on one WebSocket (store off); its seconds, connecting
    included."""
    started = time.perf_counter()
    async with connect(base_url.replace("http", "ws", 1) + "/v1/responses",
                       max_size=None) as socket:
        previous, items = None, [{"role": "user", "content": TASK}]
        for turn in range(turns):
            await socket.send(json.dumps({"type": "response.create", **TURN, "input": items,
                                          "previous_response_id": previous, "store": False,
                                          "cache_salt": salt}))
            response = await terminal(socket)
            previous, items = response["id"], call_output(response, turn)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="tool-call turns in a session")
    parser.add_argument("--rounds", type=int, default=2,
                        help="sessions per way, taking turns (after a warm-up)")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"http": [], "resent": [], "socket": []}
    with stack() as base_url:
        sessions: dict[str, Callable[[str], float]] = {
            "http": lambda salt: http_session(base_url, args.turns, salt),
            "resent": lambda salt: resent_session(base_url, args.turns, salt),
            "socket": lambda salt: asyncio.run(socket_session(base_url, args.turns, salt)),
        }
        # Warm-up: the worker's first prefill, the API's first requests.
        http_session(base_url, 1, "warm-up")
        asyncio.run(socket_session(base_url, 1, "warm-up"))
        for round_number in range(args.rounds):
            for name, session in sessions.items():
                # Its own cache_salt: a session reuses its own prefix, never the one the
                # same prompts left in the cache in another session.
                times[name].append(session(f"{name}-{round_number}"))
    row: dict[str, Any] = {"turns": args.turns, "rounds": args.rounds}
    for name, runs in times.items():
        row[f"{name}_s"], row[f"{name}_runs"] = statistics.median(runs), runs
    row["socket_vs_http"] = row["socket_s"] / row["http_s"]
    row["socket_vs_resent"] = row["socket_s"] / row["resent_s"]
    print(f"{args.turns}-turn tool-call session, median of {args.rounds}: "
          f"HTTP + previous_response_id (store on) {row['http_s']:.2f}s, HTTP resending the "
          f"history (store off) {row['resent_s']:.2f}s, WebSocket (store off) "
          f"{row['socket_s']:.2f}s: the socket takes {row['socket_vs_http']:.2f}x the "
          f"chained HTTP time and {row['socket_vs_resent']:.2f}x the resending one", flush=True)
    return row

if __name__ == "__main__":
    # A SIGTERM still stops the processes the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
