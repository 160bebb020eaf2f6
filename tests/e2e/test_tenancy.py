"""Tenancy against real processes: the session's nats-server and worker, a redis-server,
and an API with the store on and two API keys. What one key sends never reaches another:
not its stored items, not its prompts through the prefix cache; the owner rides on every
request event."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from events import RequestAccepted
from journal import Journal, JournalSettings
from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_for, wait_http

ALICE, BOB = "key-alice", "key-bob"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture(scope="module")
def tenants_url(stack: Stack, redis_server: EmbeddedRedis) -> Iterator[str]:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis_server.url,
                        "SPATE_API_KEYS": f"{ALICE},{BOB}"}, "tenants-api")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base_url}/ready", api, timeout=60)
        yield base_url
    finally:
        api.stop()


def post(base_url: str, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{base_url}/v1/responses", json={"model": DEFAULT_MODEL, **body},
                      headers=headers, timeout=180)


def request_event(nats_url: str, response_id: str) -> RequestAccepted:
    async def read() -> RequestAccepted:
        journal = Journal(JournalSettings(nats_url=nats_url), name="tenancy-test")
        journal.start()
        try:
            assert await journal.wait_connected()
            first = (await journal.read_log(response_id))[0]
            assert isinstance(first, RequestAccepted)
            return first
        finally:
            await journal.close()
    return asyncio.run(read())


def test_the_owner_rides_on_every_request_event(stack: Stack, tenants_url: str) -> None:
    unkeyed = post(stack.base_url, {"input": "Hi", "max_output_tokens": 1})
    assert unkeyed.status_code == 200, unkeyed.text
    assert request_event(stack.nats_url, unkeyed.json()["id"]).owner == "shared"
    for store in (True, False):
        keyed = post(tenants_url, {"input": "Hi", "max_output_tokens": 1, "store": store}, ALICE)
        assert keyed.status_code == 200, keyed.text
        owner = request_event(stack.nats_url, keyed.json()["id"]).owner
        assert owner == hashlib.sha256(ALICE.encode()).hexdigest()[:32]


def cached_tokens(reply: httpx.Response) -> int:
    assert reply.status_code == 200, reply.text
    return int(reply.json()["usage"]["input_tokens_details"]["cached_tokens"])


def test_the_prefix_cache_is_scoped_by_owner_and_salt(tenants_url: str) -> None:
    words = " ".join(f"w{index}" for index in range(200))
    body = {"input": f"Private notes of one tenant: {words}", "max_output_tokens": 1,
            "store": False}
    cached_tokens(post(tenants_url, body, ALICE))
    assert cached_tokens(post(tenants_url, body, ALICE)) > 100  # the owner reuses its own
    assert cached_tokens(post(tenants_url, body, BOB)) < 32  # another owner cannot probe it
    salted = {**body, "cache_salt": "team-1"}
    assert cached_tokens(post(tenants_url, salted, ALICE)) < 32  # a salt scopes within
    assert cached_tokens(post(tenants_url, salted, ALICE)) > 100


def test_a_request_id_holds_only_what_a_subject_carries(stack: Stack) -> None:
    for request_id in ("résumé-1", "a.b", "a b", "x" * 201):
        reply = post(stack.base_url, {"input": "Hi", "max_output_tokens": 1,
                                      "request_id": request_id})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "request_id"


def test_two_posts_racing_for_one_request_id_one_wins(stack: Stack, tenants_url: str) -> None:
    request_id = f"race-{uuid.uuid4().hex}"
    body = {"input": "Hi", "max_output_tokens": 1, "request_id": request_id}

    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=180) as client:
            return list(await asyncio.gather(*(
                client.post(f"{stack.base_url}/v1/responses",
                            json={"model": DEFAULT_MODEL, **body, "stream": stream})
                for stream in (False, True, False, True))))

    replies = asyncio.run(race())
    assert sorted(reply.status_code for reply in replies) == [200, 409, 409, 409]
    for reply in replies:
        if reply.status_code == 409:
            assert reply.json()["error"]["param"] == "request_id"
    # Another key cannot take it either: response ids are one namespace.
    again = post(tenants_url, body, BOB)
    assert again.status_code == 409 and "already in use" in again.json()["error"]["message"]


def message(item_id: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "id": item_id, "content": text}


def error_param(reply: httpx.Response, status: int = 400) -> str:
    assert reply.status_code == status, reply.text
    return str(reply.json()["error"]["param"])


def test_an_item_id_is_one_owners(tenants_url: str) -> None:
    item_id = f"msg_{uuid.uuid4().hex}"
    mine = post(tenants_url, {"input": [message(item_id, "Alice's words")],
                              "max_output_tokens": 1}, ALICE)
    assert mine.status_code == 200, mine.text
    # Bob stores an item under the same id: Alice's item is untouched, and each key's
    # reference finds its own.
    theirs = post(tenants_url, {"input": [message(item_id, "Bob's words")],
                                "max_output_tokens": 1}, BOB)
    assert theirs.status_code == 200, theirs.text
    reference = {"input": [{"type": "item_reference", "id": item_id}], "max_output_tokens": 1}
    for key, words in ((ALICE, "Alice's words"), (BOB, "Bob's words")):
        referred = post(tenants_url, reference, key)
        assert referred.status_code == 200, referred.text
        items = httpx.get(f"{tenants_url}/v1/responses/{referred.json()['id']}/input_items",
                          headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert items.json()["data"][0]["content"][0]["text"] == words


def test_duplicate_item_ids_are_400s_before_anything_is_published(tenants_url: str) -> None:
    twice = f"msg_{uuid.uuid4().hex}"
    reply = post(tenants_url, {"input": [message(twice, "one"), message(twice, "two")],
                               "max_output_tokens": 1}, ALICE)
    assert error_param(reply) == "input[1].id"
    assert "Duplicate item id" in reply.json()["error"]["message"]

    first = post(tenants_url, {"input": [message(twice, "one")], "max_output_tokens": 1}, ALICE)
    assert first.status_code == 200, first.text
    chained = post(tenants_url, {"input": [message(twice, "again")], "max_output_tokens": 1,
                                 "previous_response_id": first.json()["id"]}, ALICE)
    assert error_param(chained) == "input[0].id"

    headers = {"Authorization": f"Bearer {ALICE}"}
    conversations = f"{tenants_url}/v1/conversations"
    created = httpx.post(conversations, json={"items": [message(twice, "hello")]},
                         headers=headers, timeout=30)
    assert created.status_code == 200, created.text
    conversation_id = created.json()["id"]
    in_conversation = post(tenants_url, {"input": [message(twice, "hello again")],
                                         "max_output_tokens": 1,
                                         "conversation": conversation_id}, ALICE)
    assert error_param(in_conversation) == "input[0].id"
    added = httpx.post(f"{conversations}/{conversation_id}/items",
                       json={"items": [message(twice, "once more")]}, headers=headers, timeout=30)
    assert error_param(added) == "items[0].id"
    doubled = httpx.post(conversations, json={"items": [message("m1", "a"), message("m1", "b")]},
                         headers=headers, timeout=30)
    assert error_param(doubled) == "items[1].id"
    # The store's projection went on: a response stored after all this reads back.
    after = post(tenants_url, {"input": "Hi", "max_output_tokens": 1}, ALICE)
    response_id = after.json()["id"]
    assert wait_for(lambda: httpx.get(f"{tenants_url}/v1/responses/{response_id}",
                                      headers=headers, timeout=30).status_code == 200, timeout=30)


def test_lists_past_their_bounds_are_400s_that_cost_nothing(stack: Stack) -> None:
    for body, param in (({"stop": ["x"] * 100_000}, "stop"),
                        ({"structured_outputs": {"choice": [f"c{n}" for n in range(20_000)]}},
                         "structured_outputs.choice")):
        started = time.monotonic()
        reply = post(stack.base_url, {"input": "Hi", "max_output_tokens": 1, **body})
        assert error_param(reply) == param
        assert time.monotonic() - started < 10  # refused, never compiled or scanned
