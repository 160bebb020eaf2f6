"""Rate limits against real processes: two API replicas on the session's nats-server and
worker, with per-key and per-group limits. Every create answer (JSON, SSE, the 429)
carries x-ratelimit-* headers counting down; past the RPM a 429 with Retry-After; two
keys spend two budgets, two keys of one group one, whichever replica serves them; the
official SDK waits out a 429 and succeeds; an API with no limits sends no headers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_http

SHORT = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2}
KEYS = ["key-alice", "key-bob", "key-team-1", "key-team-2", "key-sdk", "key-socket",
        "key-warm"]
GROUPS = {
    "team": {"keys": ["key-team-1", "key-team-2"], "rpm": 3},
    # 10 tokens a second: a spent budget fits a small request again within seconds.
    "sdk": {"keys": ["key-sdk"], "tpm": 600},
}
LIMITS = {"SPATE_API_KEYS": ",".join(KEYS), "SPATE_KEY_RPM": "3",
          "SPATE_RATE_LIMITS": json.dumps(GROUPS)}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def replicas(stack: Stack) -> Iterator[tuple[str, str]]:
    started: list[SpateProcess] = []
    urls = []
    try:
        for index in range(2):
            port = free_port()
            api = SpateProcess(["api", "--port", str(port)],
                               {"SPATE_NATS_URL": stack.nats_url, **LIMITS},
                               f"rate-limited-api-{index}")
            started.append(api)
            urls.append(f"http://127.0.0.1:{port}")
            wait_http(f"{urls[-1]}/ready", api, timeout=60)
        yield urls[0], urls[1]
    finally:
        for api in started:
            api.stop()


def create(base: str, key: str, **fields: object) -> httpx.Response:
    return httpx.post(f"{base}/v1/responses", json={**SHORT, **fields}, headers=bearer(key),
                      timeout=60)


def remaining(reply: httpx.Response) -> int:
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-ratelimit-limit-requests"] == "3"
    return int(reply.headers["x-ratelimit-remaining-requests"])


def refused(reply: httpx.Response, limit: str) -> None:
    assert reply.status_code == 429, reply.text
    error = reply.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
    assert limit in error["message"]
    assert int(reply.headers["retry-after"]) >= 1
    assert int(reply.headers["retry-after-ms"]) >= 1
    assert reply.headers["x-ratelimit-remaining-requests"] == "0"


def test_headers_count_down_on_json_and_sse_then_429(replicas: tuple[str, str]) -> None:
    one, _ = replicas
    first = create(one, "key-alice")
    assert remaining(first) == 2
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    with httpx.stream("POST", f"{one}/v1/responses", json={**SHORT, "stream": True},
                      headers=bearer("key-alice"), timeout=60) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert remaining(streamed) == 1
        assert "data: [DONE]" in streamed.read().decode()
    assert remaining(create(one, "key-alice")) == 0
    past = create(one, "key-alice")
    refused(past, "requests per min (RPM) for this API key: Limit 3")
    # At 3 a minute one request comes back every 20 s.
    assert 15 <= int(past.headers["retry-after"]) <= 20


def test_keys_apart_and_a_group_together_across_replicas(replicas: tuple[str, str]) -> None:
    one, two = replicas
    assert remaining(create(one, "key-bob")) == 2  # Alice's spending is not Bob's
    assert remaining(create(two, "key-bob")) == 1  # nor is a replica's its own
    assert remaining(create(one, "key-team-1")) == 2
    assert remaining(create(two, "key-team-2")) == 1  # the group's budget
    assert remaining(create(two, "key-team-1")) == 0
    refused(create(one, "key-team-2"), "requests per min (RPM) for key group 'team'")


def test_the_sdk_waits_out_a_429_and_succeeds(replicas: tuple[str, str]) -> None:
    one, two = replicas
    # Spend the group's whole 600 tokens a minute: a create is charged its input (1
    # token) and its max_output_tokens; it goes before the end, so no usage trues it up.
    with httpx.stream("POST", f"{one}/v1/responses",
                      json={**SHORT, "stream": True, "max_output_tokens": 599},
                      headers=bearer("key-sdk"), timeout=60) as spent:
        assert spent.headers["x-ratelimit-remaining-tokens"] == "0"
        assert spent.headers["x-ratelimit-limit-tokens"] == "600"
        assert "x-ratelimit-limit-requests" not in spent.headers  # the group sets no RPM
    statuses: list[tuple[int, httpx.Headers]] = []
    http = httpx.Client(event_hooks={"response": [
        lambda reply: statuses.append((reply.status_code, reply.headers))]})
    client = openai.OpenAI(base_url=f"{two}/v1", api_key="key-sdk", max_retries=2,
                           http_client=http)
    started = time.monotonic()
    with contextlib.closing(http):
        raw = client.responses.with_raw_response.create(
            model=DEFAULT_MODEL, input="Hi", max_output_tokens=30)
    waited = time.monotonic() - started
    assert raw.parse().status in ("completed", "incomplete")
    assert [status for status, _ in statuses] == [429, 200]
    wait_ms = int(statuses[0][1]["retry-after-ms"])
    assert 1_000 <= wait_ms <= 3_100  # 31 tokens at 10 a second, less what refilled since
    assert waited >= wait_ms / 1000
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 600


def test_socket_creates_spend_the_keys_budget(replicas: tuple[str, str]) -> None:
    one, two = replicas

    async def on_a_socket() -> list[dict[str, Any]]:
        answers = []
        url = f"{two.replace('http', 'ws', 1)}/v1/responses"
        async with connect(url, additional_headers=bearer("key-socket")) as socket:
            for _ in range(3):
                await socket.send(json.dumps({"type": "response.create", **SHORT}))
                while True:
                    event = json.loads(await asyncio.wait_for(socket.recv(), 60))
                    if event["type"] in ("response.completed", "response.incomplete",
                                         "response.failed", "error"):
                        answers.append(event)
                        break
        return answers

    assert remaining(create(one, "key-socket")) == 2
    *answered, past = asyncio.run(on_a_socket())
    # The two creates left, made on another replica's socket (max_output_tokens reached).
    assert [event["type"] for event in answered] == ["response.incomplete"] * 2
    assert past["type"] == "error" and past["status"] == 429
    assert past["error"]["code"] == "rate_limit_exceeded"
    assert "requests per min (RPM)" in past["error"]["message"]
    refused(create(one, "key-socket"), "requests per min (RPM) for this API key")


def test_socket_warm_ups_spend_the_keys_budget(replicas: tuple[str, str]) -> None:
    """A `generate: false` create prefills on a worker as a turn does: it is charged."""
    one, two = replicas

    async def warm_up() -> list[str]:
        kinds = []
        url = f"{two.replace('http', 'ws', 1)}/v1/responses"
        async with connect(url, additional_headers=bearer("key-warm")) as socket:
            for _ in range(4):
                await socket.send(json.dumps({"type": "response.create", "generate": False,
                                              **SHORT}))
                while True:
                    event = json.loads(await asyncio.wait_for(socket.recv(), 60))
                    if event["type"] in ("response.completed", "error"):
                        kinds.append(event["type"] if event["type"] != "error"
                                     else f"error {event['status']}")
                        break
        return kinds

    assert asyncio.run(warm_up()) == ["response.completed"] * 3 + ["error 429"]
    refused(create(one, "key-warm"), "requests per min (RPM) for this API key")


def test_no_headers_where_no_limit_applies(stack: Stack) -> None:
    reply = httpx.post(f"{stack.base_url}/v1/responses", json=SHORT, timeout=60)
    assert reply.status_code == 200, reply.text
    assert not [name for name in reply.headers if name.startswith("x-ratelimit")]
