"""Input and backpressure against real processes: a nats-server with a small max_payload,
the API with a short SSE send timeout, and a worker serving the default model.

- bodies under SPATE_MAX_BODY_BYTES but over what NATS takes are 413s that leak nothing;
- an SSE client that stops reading is cut after the send timeout, its generation
  cancelled;
- prompts never reach the processes' logs at INFO.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from journal import Journal, JournalSettings
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_http

MAX_PAYLOAD = 64 * 1024
SEND_TIMEOUT_S = 2.0


def monitored_nats() -> EmbeddedNats:
    config = Path(tempfile.mkdtemp(prefix="spate-nats-conf-")) / "nats.conf"
    config.write_text(f"max_payload: {MAX_PAYLOAD}\n")
    return EmbeddedNats(extra_args=("-c", str(config), "-m", str(free_port())))


@pytest.fixture(scope="module")
def limits_stack() -> Iterator[tuple[Stack, EmbeddedNats]]:
    server = monitored_nats().start()
    env = {"SPATE_NATS_URL": server.url, "SPATE_LOG_LEVEL": "INFO"}
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {**env, "SPATE_SSE_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S)}, "limits-api")
    worker = SpateProcess(["worker", "--model", DEFAULT_MODEL, "--max-num-seqs", "4"],
                          {**env, "SPATE_WORKER_ID": "limits-worker"}, "limits-worker")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base_url}/ready", worker, timeout=MODEL_LOAD_TIMEOUT)
        yield Stack(server.url, base_url, api, worker), server
    finally:
        api.stop()
        worker.stop()
        server.stop()


def api_subscriptions(server: EmbeddedNats) -> int:
    """Subscriptions the API's NATS connection holds, from the server's monitoring port."""
    port = server.extra_args[server.extra_args.index("-m") + 1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/connz?subs=1", timeout=5) as reply:
        connz = json.load(reply)
    return sum(conn.get("num_subscriptions", 0) for conn in connz["connections"]
               if conn.get("name") == "spate-api")


def test_bodies_too_big_for_nats_are_413s_that_leak_nothing(
    limits_stack: tuple[Stack, EmbeddedNats],
) -> None:
    stack, server = limits_stack
    before = api_subscriptions(server)
    big = {"model": DEFAULT_MODEL, "input": "y " * MAX_PAYLOAD, "max_output_tokens": 2}
    with httpx.Client(base_url=stack.base_url, timeout=60) as client:
        for stream in [False, True] * 100:
            reply = client.post("/v1/responses", json={**big, "stream": stream})
            assert reply.status_code == 413, reply.text
            error = reply.json()["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
        reply = client.post("/v1/responses/input_tokens", json=big)
        assert reply.status_code == 413, reply.text
        assert api_subscriptions(server) == before
        reply = client.post("/v1/responses", json={"model": DEFAULT_MODEL, "input": "Hi!",
                                                   "max_output_tokens": 3})
        assert reply.status_code == 200, reply.text
        assert reply.json()["status"] in ("completed", "incomplete")


async def read_log_until_finished(nats_url: str, response_id: str, timeout: float) -> list[Any]:
    journal = Journal(JournalSettings(nats_url=nats_url), name="limits-test")
    journal.start()
    try:
        assert await journal.wait_connected()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = await journal.read_log(response_id)
            if any(event.type == "generation.finished" for event in events):
                return events
            await asyncio.sleep(0.5)
        raise AssertionError(f"{response_id} did not finish in {timeout}s")
    finally:
        await journal.close()


def test_a_client_that_stops_reading_is_cut_and_its_generation_cancelled(
    limits_stack: tuple[Stack, EmbeddedNats],
) -> None:
    stack, _ = limits_stack
    max_tokens = 3000
    # The metadata (echoed by response.created and response.in_progress, never part of
    # the prompt) fills the socket's buffers before the first token; logprobs with 20
    # alternatives make each token's event over a kilobyte on top.
    body = json.dumps({
        "model": DEFAULT_MODEL, "input": "Count from one to ten thousand.", "stream": True,
        "max_output_tokens": max_tokens, "ignore_eos": True,
        "metadata": {f"k{index}": "m" * 512 for index in range(16)},  # the most it may hold
        "include": ["message.output_text.logprobs"], "top_logprobs": 20,
    }).encode()
    port = int(stack.base_url.rsplit(":", 1)[1])
    sock = socket.socket()
    # A small receive window, set before connecting, so the server's writes stall soon.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    try:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: spate\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while (match := re.search(rb'"id":"(resp_[A-Za-z0-9_-]+)"', received)) is None:
            chunk = sock.recv(1024)
            assert chunk, received
            received += chunk
        response_id = match.group(1).decode()
        # Stop reading. The send timeout cuts the stream once the server's socket buffer
        # (which the kernel grows to megabytes) is full, and the cut cancels the
        # generation: minutes of CPU decoding on a loaded machine, hence the allowance.
        events = asyncio.run(read_log_until_finished(stack.nats_url, response_id, timeout=480))
        finished = next(event for event in events if event.type == "generation.finished")
        assert finished.finish_reason == "cancelled", finished
        generated = sum(len(event.token_ids) for event in events
                        if event.type == "tokens.generated")
        assert generated < max_tokens
        # What the server had buffered drains, then the connection ends, with no
        # terminal event: the stream was cut, not finished.
        sock.settimeout(60)
        while chunk := sock.recv(65536):
            received += chunk
        assert b"response.completed" not in received
        assert b"response.incomplete" not in received
        assert f"cut the stream of {response_id}" in stack.api.output()
    finally:
        sock.close()


def test_prompts_never_reach_the_logs(limits_stack: tuple[Stack, EmbeddedNats]) -> None:
    stack, _ = limits_stack
    secret = f"zebra-{uuid.uuid4().hex}"
    instructions = f"quokka-{uuid.uuid4().hex}"
    body = {"model": DEFAULT_MODEL, "input": f"Repeat {secret}", "instructions": instructions,
            "max_output_tokens": 3}
    with httpx.Client(base_url=stack.base_url, timeout=120) as client:
        assert client.post("/v1/responses", json=body).status_code == 200
        with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as reply:
            assert reply.status_code == 200
            reply.read()
        # Refused requests too: a 400 must not echo the prompt into a log.
        assert client.post("/v1/responses", json={**body, "top_k": -5}).status_code == 400
        assert client.post("/v1/responses/input_tokens", json=body).status_code == 200
    assert stack.worker is not None
    for process in (stack.api, stack.worker):
        output = process.output()
        assert " INFO " in output, f"{process.name} logs nothing at INFO:\n{output[-2000:]}"
        assert secret not in output, f"{process.name} logged the prompt"
        assert instructions not in output, f"{process.name} logged the instructions"
