"""Conversations end to end: a real redis-server, an API with the store on and the
session's worker, every route read through the official SDK in strict mode."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from cli.redis_server import EmbeddedRedis
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_store import sdk, store_api


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> Iterator[str]:
    with EmbeddedRedis() as redis:
        api, url = store_api(stack, redis, "conversations-api")
        try:
            yield url
        finally:
            api.stop()


def texts(items: list) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items]


def test_create_retrieve_update_delete(base_url: str) -> None:
    client = sdk(base_url)
    conv = client.conversations.create(
        metadata={"topic": "tea"},
        items=[{"role": "system", "content": "Be brief."},
               {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Hello"}]}],
    )
    assert conv.object == "conversation" and conv.id.startswith("conv_")
    assert conv.metadata == {"topic": "tea"}
    assert client.conversations.retrieve(conv.id).created_at == conv.created_at
    updated = client.conversations.update(conv.id, metadata={"topic": "coffee"})
    assert updated.metadata == {"topic": "coffee"}
    assert client.conversations.retrieve(conv.id).metadata == {"topic": "coffee"}
    items = client.conversations.items.list(conv.id, order="asc")
    assert texts(items.data) == [("system", "Be brief."), ("user", "Hello")]
    deleted = client.conversations.delete(conv.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (conv.id, "conversation.deleted", True)
    with pytest.raises(NotFoundError) as missing:
        client.conversations.retrieve(conv.id)
    assert missing.value.body["message"] == f"Conversation with id '{conv.id}' not found."
    assert missing.value.body["param"] == "conversation_id"


def test_items_add_page_retrieve_delete(base_url: str) -> None:
    client = sdk(base_url)
    conv = client.conversations.create()
    assert conv.metadata == {}
    added = client.conversations.items.create(conv.id, items=[
        {"role": "user", "content": f"message {n}"} for n in range(5)])
    assert added.object == "list" and len(added.data) == 5 and not added.has_more
    assert (added.first_id, added.last_id) == (added.data[0].id, added.data[-1].id)
    call = client.conversations.items.create(conv.id, items=[
        {"type": "function_call", "call_id": "call_1", "name": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "noon"},
        {"role": "assistant", "content": "It is noon."}])
    assert [item.type for item in call.data] == ["function_call", "function_call_output",
                                                 "message"]
    first = client.conversations.items.list(conv.id, limit=3, order="asc")
    assert texts(first.data) == [("user", f"message {n}") for n in range(3)]
    assert first.has_more
    rest = client.conversations.items.list(conv.id, after=first.last_id, limit=100, order="asc")
    assert [item.type for item in rest.data] == ["message", "message", "function_call",
                                                 "function_call_output", "message"]
    assert not rest.has_more
    newest = client.conversations.items.list(conv.id, limit=1)  # desc by default
    assert newest.data[0].content[0].text == "It is noon."
    assert newest.data[0].content[0].type == "output_text"
    paged = [item.id for item in client.conversations.items.list(conv.id, limit=2)]
    assert len(paged) == 8  # the SDK's auto-pagination follows has_more
    one = client.conversations.items.retrieve(added.data[1].id, conversation_id=conv.id)
    assert one.content[0].text == "message 1"
    after_delete = client.conversations.items.delete(added.data[1].id, conversation_id=conv.id)
    assert after_delete.id == conv.id and after_delete.object == "conversation"
    with pytest.raises(NotFoundError) as gone:
        client.conversations.items.retrieve(added.data[1].id, conversation_id=conv.id)
    assert gone.value.body["param"] == "item_id"
    assert len(client.conversations.items.list(conv.id, limit=100).data) == 7


def test_bad_bodies_name_the_field(base_url: str) -> None:
    client = sdk(base_url)
    conv = client.conversations.create()
    headers = {"Authorization": "Bearer key-alice"}
    cases = [
        ("/v1/conversations", {"metadata": {"a": 1}}, "metadata.a"),
        ("/v1/conversations", {"items": [{"type": "input_image"}]}, "items[0].type"),
        ("/v1/conversations", {"items": [{"role": "robot", "content": "x"}]}, "items[0].role"),
        ("/v1/conversations", {"colour": "red"}, "colour"),
        (f"/v1/conversations/{conv.id}", {"metadata": "x"}, "metadata"),
        (f"/v1/conversations/{conv.id}/items", {"items": []}, "items"),
        (f"/v1/conversations/{conv.id}/items", {}, "items"),
    ]
    for path, body, param in cases:
        reply = httpx.post(f"{base_url}{path}", json=body, headers=headers, timeout=10)
        assert reply.status_code == 400, (path, body, reply.text)
        assert reply.json()["error"]["param"] == param, (body, reply.json())
    reply = httpx.post(f"{base_url}/v1/conversations", content=b"[1]", headers=headers,
                       timeout=10)
    assert reply.status_code == 400
    with pytest.raises(BadRequestError) as bad_cursor:
        client.conversations.items.list(conv.id, after="msg_nope")
    assert bad_cursor.value.body["param"] == "after"
    reply = httpx.get(f"{base_url}/v1/conversations/{conv.id}/items?limit=101",
                      headers=headers, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "limit"


def test_other_keys_see_nothing(base_url: str) -> None:
    alice, bob = sdk(base_url), sdk(base_url, "key-bob")
    conv = alice.conversations.create(items=[{"role": "user", "content": "secret"}])
    item_id = alice.conversations.items.list(conv.id).data[0].id
    for attempt in (
        lambda: bob.conversations.retrieve(conv.id),
        lambda: bob.conversations.update(conv.id, metadata={"x": "y"}),
        lambda: bob.conversations.delete(conv.id),
        lambda: bob.conversations.items.list(conv.id),
        lambda: bob.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}]),
        lambda: bob.conversations.items.retrieve(item_id, conversation_id=conv.id),
        lambda: bob.conversations.items.delete(item_id, conversation_id=conv.id),
        lambda: bob.responses.create(model=DEFAULT_MODEL, input="x", conversation=conv.id),
    ):
        with pytest.raises(NotFoundError):
            attempt()
    assert texts(alice.conversations.items.list(conv.id).data) == [("user", "secret")]
    assert alice.conversations.retrieve(conv.id).metadata == {}


def test_store_off_is_a_404_that_says_why(stack: Stack) -> None:
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                    _strict_response_validation=True)
    attempts = {
        "create": lambda: client.conversations.create(),
        "retrieve": lambda: client.conversations.retrieve("conv_x"),
        "update": lambda: client.conversations.update("conv_x", metadata={}),
        "delete": lambda: client.conversations.delete("conv_x"),
        "list": lambda: client.conversations.items.list("conv_x"),
        "add": lambda: client.conversations.items.create("conv_x", items=[]),
        "item": lambda: client.conversations.items.retrieve("msg_x", conversation_id="conv_x"),
        "delete item": lambda: client.conversations.items.delete("msg_x",
                                                                 conversation_id="conv_x"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(NotFoundError) as off:
            attempt()
        assert "SPATE_STORE_URL" in off.value.body["message"], name
        if name != "create":
            assert "conv_x" in off.value.body["message"], name


def wait_items(client: OpenAI, conversation_id: str, count: int, timeout: float = 30) -> list:
    """The conversation's items once there are `count`: a response adds its items when
    the store has projected its end."""
    deadline = time.monotonic() + timeout
    while True:
        items = client.conversations.items.list(conversation_id, order="asc", limit=100).data
        if len(items) >= count or time.monotonic() > deadline:
            return items
        time.sleep(0.1)


def test_responses_in_a_conversation_grow_it(base_url: str) -> None:
    client = sdk(base_url)
    conv = client.conversations.create(items=[{"role": "system", "content": "Be brief."}])
    first = client.responses.create(model=DEFAULT_MODEL, input="My name is Ada. Say hi.",
                                    conversation=conv.id, max_output_tokens=12, temperature=0)
    assert first.conversation is not None and first.conversation.id == conv.id
    items = wait_items(client, conv.id, 3)
    assert [(item.type, item.role) for item in items] == [
        ("message", "system"), ("message", "user"), ("message", "assistant")]
    assert items[1].content[0].text == "My name is Ada. Say hi."
    assert items[2].content[0].text == first.output_text
    second = client.responses.create(model=DEFAULT_MODEL, input="What is my name?",
                                     conversation={"id": conv.id}, max_output_tokens=12,
                                     temperature=0)
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    items = wait_items(client, conv.id, 5)
    assert [item.role for item in items] == ["system", "user", "assistant", "user", "assistant"]
    assert items[3].content[0].text == "What is my name?"
    alone = client.responses.input_tokens.count(model=DEFAULT_MODEL, input="Bye.")
    within = client.responses.input_tokens.count(model=DEFAULT_MODEL, input="Bye.",
                                                 conversation=conv.id)
    assert within.input_tokens > alone.input_tokens
    given = client.responses.input_items.list(second.id)  # newest first
    assert given.data[0].content[0].text == "What is my name?"
    with pytest.raises(NotFoundError) as missing:
        client.responses.create(model=DEFAULT_MODEL, input="x", conversation="conv_nope")
    assert missing.value.body["param"] == "conversation"
