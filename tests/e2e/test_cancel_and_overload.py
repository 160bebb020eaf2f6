"""A client that hangs up cancels its response within a step; past the in-flight bound
an API replica answers 429 with Retry-After; configured keys are enforced."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx

from cli.nats_server import free_port
from journal import Journal, JournalSettings
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_log
from tests.processes import SpateProcess, wait_http

LONG = {"model": DEFAULT_MODEL, "input": "Write a very long story about a lighthouse keeper.",
        "temperature": 0, "max_output_tokens": 400, "ignore_eos": True, "stream": True}


def test_client_disconnect_cancels_the_response(stack: Stack) -> None:
    response_id = None
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=LONG, timeout=120) as reply:
        deltas = 0
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[5:])
                response_id = response_id or event.get("response", {}).get("id")
                deltas += event["type"] == "response.output_text.delta"
                if deltas == 3:
                    break  # hang up mid-answer
    assert response_id is not None
    log = asyncio.run(read_log(stack.nats_url, response_id))
    assert log[-1].finish_reason == "cancelled"
    assert log[-1].usage.output_tokens < 400
    assert log[-1].seq == len(log) - 1


def test_a_response_cancelled_before_its_worker_starts_generates_nothing(stack: Stack) -> None:
    response_id = f"resp_precancelled_{uuid.uuid4().hex}"

    async def cancel_first() -> None:
        journal = Journal(JournalSettings(nats_url=stack.nats_url), name="precancel-test")
        journal.start()
        try:
            assert await journal.wait_connected()
            await journal.cancel(response_id, "requested")
        finally:
            await journal.close()

    asyncio.run(cancel_first())
    reply = httpx.post(f"{stack.base_url}/v1/responses",
                       json={**LONG, "stream": False, "request_id": response_id}, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == response_id
    log = asyncio.run(read_log(stack.nats_url, response_id))
    assert [event.type for event in log][1:] == ["generation.finished"]
    assert log[-1].finish_reason == "cancelled"
    assert log[-1].usage.output_tokens == 0


def test_overload_is_429_with_retry_after(stack: Stack) -> None:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_MAX_INFLIGHT": "1"}, "api-bounded")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/ready", api, timeout=60)
        with httpx.stream("POST", f"{base}/v1/responses", json=LONG, timeout=120) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # kept referenced: a dropped iterator closes the stream
            next(lines)  # the first response is open
            second = httpx.post(f"{base}/v1/responses", json={**LONG, "stream": False}, timeout=30)
            assert second.status_code == 429, second.text
            assert second.headers["retry-after"].isdigit()
            assert second.json()["error"]["type"] == "rate_limit_error"
    finally:
        api.stop()


def test_api_keys_are_enforced(stack: Stack) -> None:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_API_KEYS": "k1,k2"}, "api-keys")
    base = f"http://127.0.0.1:{port}"
    body = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2}
    try:
        wait_http(f"{base}/health", api, timeout=60)
        missing = httpx.post(f"{base}/v1/responses", json=body, timeout=30)
        assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
        wrong = httpx.post(f"{base}/v1/responses", json=body, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 401
        wait_http(f"{base}/ready", api, timeout=60)
        good = httpx.post(f"{base}/v1/responses", json=body, timeout=120,
                          headers={"authorization": "Bearer k2"})
        assert good.status_code == 200, good.text
    finally:
        api.stop()
