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
from harness.waits import wait_for
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
            if line.startswith("data: {"):
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
        assert wait_for(lambda: httpx.get(f"{base_url}/ready", timeout=10).status_code == 503,
                        timeout=30)  # draining
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
        assert wait_for(lambda: log_of(stack, response_id)[0] > seq_at_cut, 60, interval=0.5)
        seq_later, cancelled = log_of(stack, response_id)
        assert not cancelled and seq_later > seq_at_cut, (seq_at_cut, seq_later)
        cancel(stack, response_id)  # free the shared worker
    finally:
        api.kill()


def test_sigterm_cuts_a_resumed_stream_resumably(stack: Stack) -> None:
    """A stream resumed through GET /v1/responses/{id}?stream=true is drained too: past the
    drain timeout it ends with the same notice, naming the last event it sent, and the
    response goes on in its worker."""
    from cli.redis_server import EmbeddedRedis

    with EmbeddedRedis() as redis:
        environment = {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis.url,
                       "SPATE_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S)}
        creator_port, resumer_port = free_port(), free_port()
        creator = SpateProcess(["api", "--port", str(creator_port)], environment, "drain-creator")
        resumer = SpateProcess(["api", "--port", str(resumer_port)], environment, "drain-resumer")
        try:
            wait_http(f"http://127.0.0.1:{creator_port}/ready", creator, timeout=60)
            wait_http(f"http://127.0.0.1:{resumer_port}/ready", resumer, timeout=60)
            body = {"model": DEFAULT_MODEL, "input": "Write a long story about the sea.",
                    "temperature": 0, "max_output_tokens": 3000, "ignore_eos": True,
                    "background": True}
            created = httpx.post(f"http://127.0.0.1:{creator_port}/v1/responses", json=body,
                                 timeout=60)
            assert created.status_code == 200, created.text
            response_id = created.json()["id"]
            events: list[dict[str, Any]] = []
            started = threading.Event()

            def resume() -> None:
                url = (f"http://127.0.0.1:{resumer_port}/v1/responses/{response_id}"
                       "?stream=true&starting_after=0")
                with httpx.stream("GET", url, timeout=300) as reply:
                    for line in reply.iter_lines():
                        if line.startswith("data: {"):
                            events.append(json.loads(line[5:]))
                            if events[-1]["type"] == "response.output_text.delta":
                                started.set()

            reader = threading.Thread(target=resume)
            reader.start()
            assert started.wait(120)
            resumer.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            reader.join(timeout=DRAIN_TIMEOUT_S + 30)
            cut_after = time.monotonic() - signalled
            assert not reader.is_alive()
            assert events[-1]["type"] == "error", events[-1]
            assert events[-1]["code"] == "server_shutting_down", events[-1]
            last_sent = events[-2]["sequence_number"]
            assert f"starting_after={last_sent}" in events[-1]["message"]
            assert events[0]["sequence_number"] == 1  # resumed after event 0
            assert DRAIN_TIMEOUT_S - 1 < cut_after < DRAIN_TIMEOUT_S + 20, f"{cut_after:.1f} s"
            assert resumer.process.wait(timeout=30) is not None
            # The response goes on: the other replica resumes it from where the cut left.
            seq_at_cut, cancelled = log_of(stack, response_id)
            assert wait_for(lambda: log_of(stack, response_id)[0] > seq_at_cut, 60, interval=0.5)
            seq_later, cancelled = log_of(stack, response_id)
            assert not cancelled and seq_later > seq_at_cut, (seq_at_cut, seq_later)
            url = (f"http://127.0.0.1:{creator_port}/v1/responses/{response_id}"
                   f"?stream=true&starting_after={last_sent}")
            with httpx.stream("GET", url, timeout=60) as reply:
                for line in reply.iter_lines():
                    if line.startswith("data: {"):
                        assert json.loads(line[5:])["sequence_number"] == last_sent + 1
                        break
            cancel(stack, response_id)  # free the shared worker
        finally:
            resumer.kill()
            creator.kill()
