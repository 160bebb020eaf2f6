"""Per-key bounds against real processes: two API replicas with the store on and two
keys, the session's worker. Each bound answers 429 with Retry-After and names itself;
another key is untouched; the background bound holds across replicas; 300 concurrent
resumes of one response all get their events or a clean 429."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_http

KEYS = "key-alice,key-bob"
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"Authorization": "Bearer key-bob"}
LONG = {"model": DEFAULT_MODEL, "input": "Write a very long story about a lighthouse keeper.",
        "max_output_tokens": 2000, "ignore_eos": True}
SHORT = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2}
BOUNDS = {"SPATE_KEY_MAX_OPEN": "1", "SPATE_KEY_MAX_BACKGROUND": "2",
          "SPATE_KEY_MAX_RESUMES": "2"}


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@contextlib.contextmanager
def replicas(stack: Stack, redis: EmbeddedRedis, env: dict[str, str], count: int) -> Iterator[list[str]]:
    started: list[SpateProcess] = []
    urls = []
    try:
        for index in range(count):
            port = free_port()
            api = SpateProcess(["api", "--port", str(port)],
                               {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis.url,
                                "SPATE_API_KEYS": KEYS, **env}, f"bounded-api-{index}")
            started.append(api)
            urls.append(f"http://127.0.0.1:{port}")
            wait_http(f"{urls[-1]}/ready", api, timeout=60)
        yield urls
    finally:
        for api in started:
            api.stop()


def refused(reply: httpx.Response, bound: str) -> None:
    assert reply.status_code == 429, reply.text
    assert reply.headers["retry-after"].isdigit()
    error = reply.json()["error"]
    assert error["type"] == "rate_limit_error" and bound in error["message"]


def cancel(base: str, response_id: str) -> None:
    reply = httpx.post(f"{base}/v1/responses/{response_id}/cancel", headers=ALICE, timeout=30)
    assert reply.status_code == 200, reply.text


def test_each_key_bound_answers_429_and_spares_other_keys(
    stack: Stack, redis_server: EmbeddedRedis,
) -> None:
    with replicas(stack, redis_server, BOUNDS, 2) as (one, two):
        # Open responses: one streaming response holds Alice's only slot on this replica.
        with httpx.stream("POST", f"{one}/v1/responses", json={**LONG, "stream": True},
                          headers=ALICE, timeout=120) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # kept referenced: a dropped iterator closes it
            next(lines)
            refused(httpx.post(f"{one}/v1/responses", json=SHORT, headers=ALICE, timeout=30),
                    "SPATE_KEY_MAX_OPEN")
            assert httpx.post(f"{one}/v1/responses", json=SHORT, headers=BOB,
                              timeout=120).status_code == 200

        # Background: two of Alice's, one on each replica, fill her bound on both.
        queued = []
        for base in (one, two):
            reply = httpx.post(f"{base}/v1/responses", json={**LONG, "background": True},
                               headers=ALICE, timeout=30)
            assert reply.status_code == 200, reply.text
            queued.append(reply.json()["id"])
        for base in (one, two):
            refused(httpx.post(f"{base}/v1/responses", json={**LONG, "background": True},
                               headers=ALICE, timeout=30), "SPATE_KEY_MAX_BACKGROUND")
        bobs = httpx.post(f"{two}/v1/responses", json={**SHORT, "background": True},
                          headers=BOB, timeout=30)
        assert bobs.status_code == 200, bobs.text

        # Resumed streams: two of Alice's on one replica fill that bound.
        url = f"{one}/v1/responses/{queued[0]}?stream=true"
        with httpx.stream("GET", url, headers=ALICE, timeout=60) as a, \
                httpx.stream("GET", url, headers=ALICE, timeout=60) as b:
            assert a.status_code == b.status_code == 200
            refused(httpx.get(url, headers=ALICE, timeout=30), "SPATE_KEY_MAX_RESUMES")

        # An ended background response gives its slot back, on every replica.
        cancel(one, queued[0])
        deadline = time.monotonic() + 30
        while True:
            reply = httpx.post(f"{two}/v1/responses", json={**LONG, "background": True},
                               headers=ALICE, timeout=30)
            if reply.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert reply.status_code == 200, reply.text
        for response_id in (queued[1], reply.json()["id"]):
            cancel(two, response_id)


async def resume_all(base: str, response_id: str, count: int) -> list[tuple[int, list[str]]]:
    """`count` concurrent resumes from the start: each one's status, and its event types
    (or, refused, its error code)."""
    limits = httpx.Limits(max_connections=count + 8)
    async with httpx.AsyncClient(timeout=180, limits=limits, headers=ALICE) as client:
        async def one() -> tuple[int, list[str]]:
            url = f"{base}/v1/responses/{response_id}?stream=true"
            async with client.stream("GET", url) as reply:
                if reply.status_code != 200:
                    body = json.loads(await reply.aread())
                    return reply.status_code, [body["error"]["code"]]
                types = [json.loads(line[5:])["type"] async for line in reply.aiter_lines()
                         if line.startswith("data:") and line != "data: [DONE]"]
                return 200, types

        return await asyncio.gather(*(one() for _ in range(count)))


def test_300_resumes_of_one_response_all_get_events_or_a_clean_refusal(
    stack: Stack, redis_server: EmbeddedRedis,
) -> None:
    env = {"SPATE_STORE_POOL_SIZE": "8", "SPATE_KEY_MAX_RESUMES": "250"}
    with replicas(stack, redis_server, env, 1) as (base,):
        body = {**SHORT, "max_output_tokens": 24, "ignore_eos": True, "background": True}
        reply = httpx.post(f"{base}/v1/responses", json=body, headers=ALICE, timeout=30)
        assert reply.status_code == 200, reply.text
        results = asyncio.run(resume_all(base, reply.json()["id"], 300))
    counts = Counter(status for status, _ in results)
    print(f"300 resumes through a pool of 8: {dict(counts)}")
    # Refused before the status line: past SPATE_KEY_MAX_RESUMES, or the pool stayed busy
    # past its wait (a loaded machine); never an empty or cut 200.
    assert set(counts) <= {200, 429, 503} and counts[200] >= 150, counts
    for status, seen in results:
        if status == 200:
            assert seen[0] == "response.created" and seen[-1] == "response.incomplete", seen
            assert seen.count("response.output_text.delta") >= 1
        else:
            assert seen == [{429: "rate_limit_exceeded", 503: "store_unavailable"}[status]]
