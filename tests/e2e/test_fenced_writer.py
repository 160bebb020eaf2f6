"""A fenced writer's events never reach a client: a real API process streams a response
(SSE) whose log is taken over while its first writer still writes, on one nats-server
and on a three-node cluster. The stale writer's events cross the bus and are refused by
the stream; the client sees exactly the stored log, as replay would give it.

The workers here are the test itself, writing through the journal exactly as a worker
does (a lease per writer, pipelined fenced publishes): no engine is needed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import ModelCard
from harness.waits import until
from journal import Journal
from tests.e2e.replay import _COMMENT as COMMENT
from tests.e2e.replay import rendered
from tests.journal.conftest import connect
from tests.journal.stale_writer import (
    STALE_TEXT,
    STORED_TEXT,
    take_over_under_a_stale_writer,
)
from tests.nats_cluster import NatsCluster
from tests.processes import SpateProcess, wait_http

MODEL = "fenced-model"


@pytest.fixture(scope="module", params=["one node", "three nodes"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[list[str], int, str]]:
    """The NATS servers' URLs, the streams' replica count, and an API (on the first
    node) that serves them."""
    with (EmbeddedNats() if request.param == "one node" else NatsCluster(3)) as bus:
        urls = [bus.url] if isinstance(bus, EmbeddedNats) else [n.url for n in bus.nodes.values()]
        replicas = len(urls)
        port = free_port()
        api = SpateProcess(["api", "--port", str(port)],
                           {"SPATE_NATS_URL": urls[0], "SPATE_STREAM_REPLICAS": str(replicas)},
                           f"fenced-api-{replicas}")
        try:
            wait_http(f"http://127.0.0.1:{port}/health", api, timeout=60)
            yield urls, replicas, f"http://127.0.0.1:{port}"
        finally:
            api.stop()


@pytest.fixture
async def writers(served: tuple[list[str], int, str]) -> AsyncIterator[list[Journal]]:
    """The stale worker's, the new worker's and a witness's journals, on the nodes the
    API is not on where there are several."""
    urls, replicas, _ = served
    connected = [await connect(urls[(index + 1) % len(urls)], name=f"spate-fenced-{index}",
                               stream_replicas=replicas) for index in range(3)]
    try:
        yield connected
    finally:
        for journal in connected:
            await journal.close()


async def stream(base_url: str, raw: list[bytes]) -> None:
    body = {"model": MODEL, "input": "Tell me about the sea.", "stream": True}
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client, \
            client.stream("POST", "/v1/responses", json=body) as reply:
        assert reply.status_code == 200, await reply.aread()
        async for chunk in reply.aiter_raw():
            raw.append(chunk)


def events_in(raw: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in b"".join(raw).splitlines()
            if line.startswith(b"data: {")]


async def test_a_fenced_writers_events_never_reach_an_sse_client(
    served: tuple[list[str], int, str], writers: list[Journal],
) -> None:
    old, new, witness = writers
    await new.registry.advertise(ModelCard(name=MODEL, context_length=2048))
    await new.registry.heartbeat(MODEL, "fenced-worker")
    raw: list[bytes] = []
    client = asyncio.create_task(stream(served[2], raw))
    try:
        # The API stores the log's seq 0 before its first SSE event.
        assert await until(lambda: bool(events_in(raw)) or client.done(), 30), raw
        response_id = events_in(raw)[0]["response"]["id"]
        took = await take_over_under_a_stale_writer(old, new, witness, response_id)
        await asyncio.wait_for(client, 60)
    finally:
        client.cancel()
    assert took.stale_sent >= 1 and took.stale_witnessed == took.stale_sent, took
    events = events_in(raw)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == STORED_TEXT and STALE_TEXT.encode() not in b"".join(raw)
    assert events[-1]["type"] == "response.completed", events[-1]
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == STORED_TEXT
    # Live equals replay: the bytes the client got are the stored log's, rendered.
    live = COMMENT.sub(b"", b"".join(raw))
    assert live == rendered(await new.read_log(response_id))
