"""Under a short ack wait: a worker frozen past it is fenced out of the log another
worker took over, and a plain (non-streaming) request whose workers all died ends with
`worker_lost` within the stated bound instead of hanging."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import GenerationFailed, GenerationFinished, GenerationStarted
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.journal.conftest import connect
from tests.processes import SpateProcess, wait_for, wait_http

ACK_WAIT_S = 4
MAX_DELIVER = 3
FAST = {"SPATE_ACK_WAIT_S": str(ACK_WAIT_S), "SPATE_MAX_DELIVER": str(MAX_DELIVER),
        "SPATE_HEARTBEAT_S": "1"}


@pytest.fixture(scope="module")
def fast_stack() -> Iterator[Stack]:
    """NATS and an API whose ack wait is a few seconds; workers are the tests' own."""
    with EmbeddedNats() as server:
        port = free_port()
        api = SpateProcess(["api", "--port", str(port)], {"SPATE_NATS_URL": server.url, **FAST},
                           "takeover-api")
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base_url}/health", api, timeout=60)
            yield Stack(server.url, base_url, api)
        finally:
            api.stop()


def worker(stack: Stack, name: str, worker_id: str) -> SpateProcess:
    return SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", name, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": worker_id, **FAST}, worker_id,
    )


def live(stack: Stack, name: str) -> bool:
    models = httpx.get(f"{stack.base_url}/v1/models", timeout=5).json()["data"]
    return any(model["id"] == name for model in models)


def read_log(stack: Stack, response_id: str) -> list[Any]:
    async def read() -> list[Any]:
        journal = await connect(stack.nats_url, name="takeover-test")
        try:
            return await journal.read_log(response_id)
        finally:
            await journal.close()

    return asyncio.run(read())


def started_by(log: list[Any]) -> list[str]:
    return [event.worker_id for event in log if isinstance(event, GenerationStarted)]


def test_a_worker_frozen_past_the_ack_wait_is_fenced_out(fast_stack: Stack) -> None:
    name = "fence-smollm"
    workers = {wid: worker(fast_stack, name, wid) for wid in ("fence-a", "fence-b")}
    try:
        for process in workers.values():  # both loaded: the one not frozen takes over
            assert wait_for(lambda p=process: "ready: serving" in p.output() or not p.alive(),
                            MODEL_LOAD_TIMEOUT, 0.5), process.output()[-3000:]
            assert process.alive(), process.output()[-3000:]
        body = {"model": name, "input": "Write a long story about the sea.", "stream": True,
                "temperature": 0, "max_output_tokens": 300}
        events: list[dict[str, Any]] = []
        with httpx.stream("POST", f"{fast_stack.base_url}/v1/responses", json=body,
                          timeout=300) as reply:
            lines = reply.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
                    if sum(e["type"] == "response.output_text.delta" for e in events) == 5:
                        break
            response_id = events[0]["response"]["id"]
            holder = started_by(read_log(fast_stack, response_id))[0]
            stale = workers[holder]
            os.kill(stale.process.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            try:  # past the ack wait the request goes to the other worker, which resumes it
                assert wait_for(lambda: len(started_by(read_log(fast_stack, response_id))) == 2,
                                ACK_WAIT_S * 10, 0.2)
            finally:
                os.kill(stale.process.pid, signal.SIGCONT)
            print(f"taken over {time.monotonic() - frozen:.1f} s after the freeze "
                  f"(ack wait {ACK_WAIT_S} s)")
            for line in lines:
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
        log = read_log(fast_stack, response_id)
        assert [event.seq for event in log] == list(range(len(log)))
        assert started_by(log) == [holder, next(wid for wid in workers if wid != holder)]
        terminal = [e for e in log if isinstance(e, (GenerationFinished, GenerationFailed))]
        assert terminal == [log[-1]] and isinstance(log[-1], GenerationFinished)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == events[-1]["response"]["output"][0]["content"][0]["text"]
        # The frozen worker woke up still holding the response: its writes were refused,
        # and it stopped that sequence.
        assert wait_for(lambda: "another writer holds the log" in stale.output(), 30, 0.2), \
            stale.output()[-3000:]
        assert stale.alive()
        print(f"log intact: {len(log)} events, {len(events)} SSE events, fenced worker stopped")
    finally:
        for process in workers.values():
            os.kill(process.process.pid, signal.SIGCONT)
            process.stop()


def test_a_plain_request_whose_workers_all_die_ends_in_bound(fast_stack: Stack) -> None:
    name = "doomed-plain-smollm"
    doomed = worker(fast_stack, name, "doomed-plain")
    try:
        assert wait_for(lambda: live(fast_stack, name) or not doomed.alive(), MODEL_LOAD_TIMEOUT, 0.5)
        response_id = f"resp_doomed_{int(time.time())}"
        body = {"model": name, "input": "Write a long story.", "max_output_tokens": 4000,
                "request_id": response_id}
        replies: list[httpx.Response] = []
        thread = threading.Thread(target=lambda: replies.append(
            httpx.post(f"{fast_stack.base_url}/v1/responses", json=body, timeout=300)))
        thread.start()
        assert wait_for(lambda: len(read_log(fast_stack, response_id)) > 3, 120, 0.3)
        doomed.kill()  # the only worker of this model: nobody can continue it
        killed = time.monotonic()
        thread.join(timeout=ACK_WAIT_S * MAX_DELIVER + 60)
        waited = time.monotonic() - killed
    finally:
        doomed.kill()
    assert replies, "no reply"
    response = replies[0].json()
    assert response["status"] == "failed", response
    assert response["error"]["code"] == "worker_lost"
    print(f"worker_lost {waited:.1f} s after the last worker died (ack wait {ACK_WAIT_S} s)")
    # The stated bound: the ack wait times the deliveries, plus a margin for a loaded machine.
    assert waited < ACK_WAIT_S * MAX_DELIVER + 20, f"{waited:.1f} s"
