"""An API replica told to stop (SIGTERM) drains: new requests get a 503 and /ready turns
not ready, open streams that end within the drain timeout end normally, and the rest are
cut with a resumable `error` event while their generation goes on in the log."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from typing import Any

import httpx

from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, Stack
from tests.journal.conftest import connect
from tests.processes import SpateProcess, wait_http

DRAIN_TIMEOUT_S = 8


def log_of(stack: Stack, response_id: str) -> tuple[int, bool]:
    async def read() -> tuple[int, bool]:
        journal = await connect(stack.nats_url, name="drain-test")
        try:
            return await journal.last_seq(response_id), await journal.cancel_requested(response_id)
        finally:
            await journal.close()

    return asyncio.run(read())


def cancel(stack: Stack, response_id: str) -> None:
    async def send() -> None:
        journal = await connect(stack.nats_url, name="drain-test")
        try:
            await journal.cancel(response_id, "requested")
        finally:
            await journal.close()

    asyncio.run(send())


def stream(base_url: str, body: dict[str, Any], events: list[dict[str, Any]],
           started: threading.Event) -> None:
    with httpx.stream("POST", f"{base_url}/v1/responses", json={**body, "stream": True},
                      timeout=300) as reply:
        for line in reply.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
                if events[-1]["type"] == "response.output_text.delta":
                    started.set()


def test_sigterm_drains_then_cuts_resumably(stack: Stack) -> None:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url,
                        "SPATE_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S)}, "drain-api")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base_url}/ready", api, timeout=60)
        body = {"model": DEFAULT_MODEL, "input": "Write a long story about the sea.",
                "temperature": 0}
        short: list[dict[str, Any]] = []
        long: list[dict[str, Any]] = []
        started = [threading.Event(), threading.Event()]
        threads = [
            threading.Thread(target=stream, args=(base_url, {**body, "max_output_tokens": 12},
                                                  short, started[0])),
            threading.Thread(target=stream, args=(base_url, {**body, "max_output_tokens": 3000,
                                                             "ignore_eos": True}, long, started[1])),
        ]
        for thread in threads:
            thread.start()
        assert all(event.wait(120) for event in started)
        api.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        time.sleep(0.5)
        refused = httpx.post(f"{base_url}/v1/responses", json={**body, "max_output_tokens": 2},
                             timeout=10)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "server_shutting_down"
        assert httpx.get(f"{base_url}/ready", timeout=10).status_code == 503
        for thread in threads:
            thread.join(timeout=DRAIN_TIMEOUT_S + 30)
        cut_after = time.monotonic() - signalled
        print(f"long stream cut {cut_after:.1f} s after SIGTERM (drain timeout {DRAIN_TIMEOUT_S} s)")
        # The short one finished within the drain timeout, as it would have anyway.
        assert short[-1]["type"] == "response.incomplete", short[-1]
        # The long one was cut with a notice naming where to resume, not failed.
        assert long[-1]["type"] == "error" and long[-1]["code"] == "server_shutting_down", long[-1]
        assert not any(e["type"] == "response.failed" for e in long)
        assert f"starting_after={long[-2]['sequence_number']}" in long[-1]["message"]
        assert DRAIN_TIMEOUT_S - 1 < cut_after < DRAIN_TIMEOUT_S + 20, f"{cut_after:.1f} s"
        assert api.process.wait(timeout=30) is not None
        # Its generation was not cancelled: the log keeps growing after the cut.
        response_id = long[0]["response"]["id"]
        seq_at_cut, cancelled = log_of(stack, response_id)
        time.sleep(2)
        seq_later, cancelled = log_of(stack, response_id)
        assert not cancelled and seq_later > seq_at_cut, (seq_at_cut, seq_later)
        cancel(stack, response_id)  # free the shared worker
    finally:
        api.kill()
