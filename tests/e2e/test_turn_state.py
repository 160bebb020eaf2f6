"""x-codex-turn-state against real processes (NATS, two API replicas sharing a key, two
workers): a create's reply carries a token, and every create that presents it, whichever
replica takes it, over HTTP or a WebSocket that presented it at its handshake, runs on
the same worker; another owner's token or a forged one is ignored, and the request is
served all the same."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from api.lowering.encrypted_content import new_key
from api.lowering.turn_state import HEADER
from cli.nats_server import EmbeddedNats, free_port
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.e2e.test_routing import worker_of
from tests.processes import SpateProcess, wait_for, wait_http

NAME = "turn-smollm"
KEYS = ("key-turn-one", "key-turn-two")
WORKERS = ("turn-a", "turn-b")
ENV = {"SPATE_HEARTBEAT_S": "0.5", "SPATE_ROUTE_DEADLINE_S": "5"}
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[str, list[str]]]:
    """(NATS's URL, the two replicas' base URLs), with both workers serving."""
    sealing = new_key()
    with EmbeddedNats() as server:
        ports = [free_port(), free_port()]
        apis = [SpateProcess(["api", "--port", str(port)],
                             {"SPATE_NATS_URL": server.url, "SPATE_API_KEYS": ",".join(KEYS),
                              "SPATE_ENCRYPTION_KEYS": sealing, "SPATE_LOG_LEVEL": "debug",
                              **ENV}, f"turn-api-{index}")
                for index, port in enumerate(ports)]
        workers = [SpateProcess(
            ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME,
             "--max-num-seqs", "2"],
            {"SPATE_NATS_URL": server.url, "SPATE_WORKER_ID": worker, **ENV}, worker,
        ) for worker in WORKERS]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for api, url in zip(apis, urls, strict=True):
                wait_http(f"{url}/health", api, timeout=60)
            for process in workers:
                assert wait_for(lambda p=process: "ready: serving" in p.output() or not p.alive(),
                                MODEL_LOAD_TIMEOUT, 0.5), process.output()[-3000:]
                assert process.alive(), process.output()[-3000:]
            # Both routers have heard from both workers (their heartbeats' cache reports).
            assert wait_for(lambda: all(f"worker {worker} serves {NAME}" in api.output()
                                        for api in apis for worker in WORKERS), 30, 0.2), [
                api.output()[-2000:] for api in apis]
            yield server.url, urls
        finally:
            for process in [*workers, *apis]:
                process.stop()


def create(url: str, key: str, turn: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", **({HEADER: turn} if turn else {})}
    body = {"model": NAME, "input": "Say one word.", "temperature": 0,
            "max_output_tokens": 2, "store": False}
    reply = httpx.post(f"{url}/v1/responses", json=body, headers=headers, timeout=TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return reply


def served_by(nats_url: str, reply: httpx.Response) -> str:
    workers = worker_of(Stack(nats_url, "", None), reply.json()["id"])  # type: ignore[arg-type]
    assert len(workers) == 1, workers
    return workers[0]


def test_a_turn_stays_on_one_worker_across_replicas(replicas: tuple[str, list[str]]) -> None:
    nats_url, urls = replicas
    first = create(urls[0], KEYS[0])
    token = first.headers[HEADER]
    assert token and len(token) < 512
    served = {served_by(nats_url, create(urls[index % 2], KEYS[0], token))
              for index in range(6)}
    assert len(served) == 1, served
    # Each replica answers a presented token with that token.
    assert create(urls[1], KEYS[0], token).headers[HEADER] == token
    # A new turn's token names the worker its first create ran on, and the turn follows
    # it from the other replica too.
    for _ in range(3):
        opened = create(urls[0], KEYS[0])
        followed = create(urls[1], KEYS[0], opened.headers[HEADER])
        assert served_by(nats_url, followed) == served_by(nats_url, opened)


def test_a_websocket_that_presents_the_token_follows_the_turn(
    replicas: tuple[str, list[str]],
) -> None:
    nats_url, urls = replicas
    token = create(urls[0], KEYS[0]).headers[HEADER]
    turn_worker = served_by(nats_url, create(urls[0], KEYS[0], token))

    async def over_socket(presented: str | None) -> tuple[str | None, str]:
        headers = {"Authorization": f"Bearer {KEYS[0]}", **({HEADER: presented} if presented else {})}
        url = urls[1].replace("http://", "ws://") + "/v1/responses"
        async with connect(url, additional_headers=headers, max_size=None) as socket:
            handshake = socket.response.headers.get(HEADER) if socket.response else None
            await socket.send(json.dumps({
                "type": "response.create", "model": NAME, "input": "Say one word.",
                "temperature": 0, "max_output_tokens": 2, "store": False}))
            while True:
                event: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT_S))
                if event["type"] in ("response.completed", "response.incomplete"):
                    return handshake, str(event["response"]["id"])
                assert event["type"] != "error" and event["type"] != "response.failed", event

    handshake, response_id = asyncio.run(over_socket(token))
    assert handshake == token
    assert worker_of(Stack(nats_url, "", None), response_id) == [turn_worker]  # type: ignore[arg-type]
    fresh, _ = asyncio.run(over_socket(None))
    assert fresh and fresh != token


@pytest.mark.parametrize("presented", ["forged", "other-owner", "oversized"])
def test_a_token_that_is_not_the_callers_is_ignored(
    replicas: tuple[str, list[str]], presented: str,
) -> None:
    _, urls = replicas
    token = create(urls[0], KEYS[0]).headers[HEADER]
    sent = {"forged": "spate0.eyJ0IjogIngifQ==", "other-owner": token,
            "oversized": "x" * 4000}[presented]
    reply = create(urls[1], KEYS[1], sent)  # a 200 all the same, with a token of its own
    assert reply.headers[HEADER] not in (sent, token)
