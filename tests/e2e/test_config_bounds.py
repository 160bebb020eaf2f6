"""Bounds of the configuration table that need no model run, against a real API process
on a nats-server of its own (so the streams and buckets it declares carry these values):
how long a model stays live after its last worker heartbeat, how long the event streams
keep a response, and the largest file a request may carry.

The model's worker here is the test itself, writing the model card and heartbeats
through the journal's registry exactly as a worker does: every check below is made by
the API before anything runs, so no engine is needed."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import ModelCard
from events.subjects import EVENTS_STREAM, REQUESTS_STREAM, WORKERS_BUCKET
from harness.waits import until
from journal import Journal, JournalSettings
from tests.processes import SpateProcess, wait_http

WORKER_TTL_S = 2.0
EVENTS_MAX_AGE_S = 3.0
MAX_FILE = 4096
MODEL = "bounds-model"


@pytest.fixture(scope="module")
def bounded() -> Iterator[tuple[EmbeddedNats, str]]:
    server = EmbeddedNats().start()
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": server.url, "SPATE_API_KEYS": "",
                        "SPATE_WORKER_TTL_S": str(WORKER_TTL_S),
                        "SPATE_EVENTS_MAX_AGE_S": str(EVENTS_MAX_AGE_S),
                        "SPATE_MAX_FILE_BYTES": str(MAX_FILE)}, "config-bounds-api")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", api, timeout=60)
        yield server, f"http://127.0.0.1:{port}"
    finally:
        api.stop()
        server.stop()


@pytest.fixture
async def journal(bounded: tuple[EmbeddedNats, str]) -> AsyncIterator[Journal]:
    connected = Journal(JournalSettings(nats_url=bounded[0].url, worker_ttl_s=WORKER_TTL_S,
                                        events_max_age_s=EVENTS_MAX_AGE_S), name="bounds-test")
    connected.start()
    assert await asyncio.wait_for(connected.wait_connected(), 30)
    try:
        yield connected
    finally:
        await connected.close()


async def serve(journal: Journal, worker_id: str = "bounds-worker") -> None:
    """What a starting worker writes: its model's card and a first heartbeat."""
    await journal.registry.advertise(ModelCard(name=MODEL, context_length=2048))
    await journal.registry.heartbeat(MODEL, worker_id)


def file_part(size: int) -> dict[str, Any]:
    data = base64.b64encode(b"x" * size).decode()
    return {"type": "input_file", "filename": "notes.txt", "file_data": data}


async def test_a_file_past_spate_max_file_bytes_is_a_400_naming_the_part(
    bounded: tuple[EmbeddedNats, str], journal: Journal,
) -> None:
    await serve(journal)
    body = {"model": MODEL, "max_output_tokens": 1, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Read this."}, file_part(MAX_FILE + 1)]}]}
    async with httpx.AsyncClient(base_url=bounded[1], timeout=30) as client:
        reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input[0].content[1]", error
    assert str(MAX_FILE) in error["message"], error


async def test_a_model_is_unavailable_once_its_heartbeat_is_older_than_spate_worker_ttl_s(
    bounded: tuple[EmbeddedNats, str], journal: Journal,
) -> None:
    js = journal.connection.require()
    bucket = await js.key_value(WORKERS_BUCKET)
    assert (await bucket.status()).ttl == WORKER_TTL_S
    await serve(journal, "short-lived")

    async def listed() -> bool:
        async with httpx.AsyncClient(base_url=bounded[1], timeout=10) as client:
            models = (await client.get("/v1/models")).json()["data"]
        return MODEL in {model["id"] for model in models}

    assert await listed()
    # No more heartbeats: the worker is gone without a word. Within the TTL (and the
    # API's few seconds of remembering a live model) it is unlisted, and a request for it
    # is a 503 rather than a wait for a worker that will never come.
    assert await until(lambda: _not(listed), WORKER_TTL_S + 10, 0.2)
    async with httpx.AsyncClient(base_url=bounded[1], timeout=10) as client:
        reply = await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "model_unavailable"


async def _not(predicate: Any) -> bool:
    return not await predicate()


async def test_the_event_streams_keep_a_response_for_spate_events_max_age_s(
    bounded: tuple[EmbeddedNats, str], journal: Journal,
) -> None:
    js = journal.connection.require()
    for stream in (REQUESTS_STREAM, EVENTS_STREAM):
        assert (await js.stream_info(stream)).config.max_age == EVENTS_MAX_AGE_S
    await serve(journal)
    # A request nobody takes: published to the request stream, and cancelled on the
    # events stream when its client goes. Both are gone once older than the bound.
    async with httpx.AsyncClient(base_url=bounded[1], timeout=2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})

    async def held(stream: str) -> int:
        return int((await js.stream_info(stream)).state.messages)

    assert await until(lambda: _held_some(held), 10, 0.2)
    assert await until(lambda: _held_none(held), EVENTS_MAX_AGE_S + 10, 0.2)


async def _held_some(held: Any) -> bool:
    return await held(REQUESTS_STREAM) > 0


async def _held_none(held: Any) -> bool:
    return await held(REQUESTS_STREAM) == 0 and await held(EVENTS_STREAM) == 0
