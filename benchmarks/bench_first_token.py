"""Where a first token's time goes: `spate serve` with the real default model, one
streaming client sending requests one after another, and a subscriber on the embedded
NATS server reading every event as it is written. Each request's time to its first
`response.output_text.delta` is split at the events' own `created_at` stamps:

- api: the client's send to the API's `request.accepted` (HTTP, validation, model check);
- queue: to the worker's `generation.started` (the request's publish, the worker's fetch,
  its lease and cancel check, the prompt);
- prefill: to the first `tokens.generated` (the prefill step and the hop off the engine
  thread);
- back: to the client's first delta (the token event's publish, the API's fold, SSE).

Prints p50 and p99 of each part in milliseconds. Every clock read is the same machine's
wall clock (`time.time()`), so the parts add up to the whole.

    .venv/bin/python benchmarks/bench_first_token.py [--requests 25] [--tokens 8]
        [--weights auto]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serve import (  # noqa: E402
    MODEL,
    Server,
    percentile,
    start,
    stop,
    stream_body,
)
from cli.nats_server import free_port  # noqa: E402

PARTS = ("api", "queue", "prefill", "back")
# The event types that end each part on the worker's side, by their `type` field.
MARKS = ("request.accepted", "generation.started", "tokens.generated")


class EventClock:
    """A NATS subscriber on its own thread: the first `created_at` of each marked event
    type, by response id."""

    def __init__(self, nats_url: str) -> None:
        self._url = nats_url
        self.stamps: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> EventClock:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("could not subscribe to the NATS server")
        return self

    def __exit__(self, *_: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        self._loop.run_until_complete(self._subscribe())

    async def _subscribe(self) -> None:
        self._stop = asyncio.Event()
        client = await nats.connect(self._url)

        async def on_message(msg: nats.aio.msg.Msg) -> None:
            try:
                event = json.loads(msg.data)
            except ValueError:
                return
            if not isinstance(event, dict) or event.get("type") not in MARKS:
                return
            with self._lock:
                marks = self.stamps.setdefault(str(event.get("response_id")), {})
                marks.setdefault(event["type"], float(event["created_at"]))

        await client.subscribe("spate.>", cb=on_message)
        await client.flush()
        self._ready.set()
        await self._stop.wait()
        await client.close()

    def marks(self, response_id: str, timeout: float = 5.0) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                marks = dict(self.stamps.get(response_id, {}))
            if all(mark in marks for mark in MARKS):
                return marks
            time.sleep(0.01)
        raise RuntimeError(f"the events of {response_id} did not all arrive: {marks}")


def first_token(client: httpx.Client, port: int, index: int, tokens: int) -> tuple[str, float, float]:
    """(response id, wall time sent, wall time of the first delta) of one streamed request."""
    body = stream_body(index, tokens)
    response_id = None
    first = None
    sent = time.time()
    with client.stream("POST", f"http://127.0.0.1:{port}/v1/responses", json=body,
                       timeout=600) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            if response_id is None and '"response.created"' in line:
                response_id = json.loads(line[5:])["response"]["id"]
            if first is None and '"response.output_text.delta"' in line:
                first = time.time()
    if response_id is None or first is None:
        raise RuntimeError(f"request {index} delivered no text")
    return response_id, sent, first


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--tokens", type=int, default=8, help="tokens per request")
    parser.add_argument("--weights", default="auto", choices=["auto", "quantized", "bf16"])
    args = parser.parse_args(argv)

    nats_port = free_port()
    server = Server(
        f"spate, {args.weights} weights",
        lambda port: [sys.executable, "-m", "cli.main", "serve", "--port", str(port),
                      "--nats-port", str(nats_port), "--weights", args.weights],
        "/ready",
    )
    port = free_port()
    process = start(server, port)
    parts: dict[str, list[float]] = {part: [] for part in (*PARTS, "total")}
    try:
        with EventClock(f"nats://127.0.0.1:{nats_port}") as clock, httpx.Client() as client:
            first_token(client, port, 0, 2)  # warm up
            for _ in range(args.requests):  # the same prompt: all of it but one token cached
                response_id, sent, first = first_token(client, port, 0, args.tokens)
                marks = clock.marks(response_id)
                points = (sent, *(marks[mark] for mark in MARKS), first)
                for part, (begin, end) in zip(PARTS, itertools.pairwise(points), strict=True):
                    parts[part].append(1000 * (end - begin))
                parts["total"].append(1000 * (first - sent))
    finally:
        stop(process)
    summary = {
        part: (percentile(values, 0.5), percentile(values, 0.99)) for part, values in parts.items()
    }
    print(f"{MODEL}, {args.weights} weights, {args.requests} requests one at a time, "
          f"ms from the client's send to its first delta")
    print("| part | p50 | p99 |")
    print("|---|---|---|")
    for part, (p50, p99) in summary.items():
        print(f"| {part} | {p50:.1f} | {p99:.1f} |")
    return summary


if __name__ == "__main__":
    main()
