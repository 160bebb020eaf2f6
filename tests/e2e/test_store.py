"""The response store end to end: a real redis-server, API replicas with the store on and
the session's worker. Stored responses read back through the official SDK in strict mode."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from openai import NotFoundError, OpenAI

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from events import GenerationFailed, GenerationFinished
from harness.waits import wait_for
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_store_failures import projection_lag
from tests.journal.conftest import connect
from tests.processes import SpateProcess, wait_http

KEYS = "key-alice,key-bob"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


def store_api(stack: Stack, redis: EmbeddedRedis, name: str) -> tuple[SpateProcess, str]:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis.url,
                        "SPATE_API_KEYS": KEYS}, name)
    base_url = f"http://127.0.0.1:{port}"
    wait_http(f"{base_url}/ready", api, timeout=60)
    return api, base_url


@pytest.fixture(scope="module")
def replicas(stack: Stack, redis_server: EmbeddedRedis) -> Iterator[list[str]]:
    started = [store_api(stack, redis_server, f"store-api-{i}") for i in range(2)]
    try:
        yield [base_url for _, base_url in started]
    finally:
        for api, _ in started:
            api.stop()


def sdk(base_url: str, key: str = "key-alice") -> OpenAI:
    return OpenAI(base_url=f"{base_url}/v1", api_key=key, _strict_response_validation=True)


def wait_status(client: OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float = 120) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        if response.status in statuses:
            return response
        time.sleep(0.2)
    raise TimeoutError(f"{response_id} not in {statuses}: {response.status}")


def log_ended(stack: Stack, response_id: str) -> bool:
    """Whether the response's log holds its terminal event."""
    async def read() -> list[object]:
        journal = await connect(stack.nats_url, name="store-test")
        try:
            return list(await journal.read_log(response_id))
        finally:
            await journal.close()

    log = asyncio.run(read())
    return bool(log) and isinstance(log[-1], (GenerationFinished, GenerationFailed))


def test_store_off_answers_clearly(stack: Stack) -> None:
    reply = httpx.get(f"{stack.base_url}/v1/responses/resp_nothing", timeout=10)
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert "resp_nothing" in error["message"] and "SPATE_STORE_URL" in error["message"]
    body = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2, "background": True}
    reply = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "background"
    reply = httpx.post(f"{stack.base_url}/v1/responses", json={**body, "background": False},
                       timeout=60)
    assert reply.status_code == 200 and reply.json()["store"] is False


def test_create_retrieve_input_items_delete(replicas: list[str]) -> None:
    client = sdk(replicas[0])
    created = client.responses.create(model=DEFAULT_MODEL, input="Name a colour.",
                                      max_output_tokens=8, temperature=0)
    assert created.store is True
    other = sdk(replicas[1])  # any replica reads it back
    fetched = wait_status(other, created.id, ("completed", "incomplete"))
    assert fetched.output_text == created.output_text
    items = other.responses.input_items.list(created.id)
    assert [item.type for item in items.data] == ["message"]
    assert items.data[0].content[0].text == "Name a colour."
    deleted = other.responses.delete(created.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(created.id)


def test_store_false_is_never_written(replicas: list[str]) -> None:
    client = sdk(replicas[0])
    created = client.responses.create(model=DEFAULT_MODEL, input="Hi", max_output_tokens=2,
                                      store=False)
    assert created.store is False
    # Once the store has applied every event in the log, this response's among them.
    assert wait_for(lambda: projection_lag(replicas[0]) == 0, timeout=60, interval=0.2)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(created.id)


def test_other_keys_see_nothing(replicas: list[str]) -> None:
    created = sdk(replicas[0]).responses.create(model=DEFAULT_MODEL, input="Hi",
                                                max_output_tokens=2)
    wait_status(sdk(replicas[0]), created.id, ("completed", "incomplete"))
    with pytest.raises(NotFoundError):
        sdk(replicas[1], "key-bob").responses.retrieve(created.id)


def test_background_polls_to_the_end_and_cancel_stays(stack: Stack, replicas: list[str]) -> None:
    client = sdk(replicas[0])
    queued = client.responses.create(model=DEFAULT_MODEL, input="Count to five.",
                                      max_output_tokens=6, background=True, temperature=0)
    assert queued.status == "queued" and queued.background is True
    done = wait_status(client, queued.id, ("completed", "incomplete"))
    assert done.output_text
    with pytest.raises(Exception) as finished:
        client.responses.cancel(queued.id)
    assert getattr(finished.value, "status_code", None) == 400

    long = client.responses.create(model=DEFAULT_MODEL, input="Write a long story.",
                                    max_output_tokens=2000, background=True)
    wait_status(client, long.id, ("in_progress",))
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    assert client.responses.cancel(long.id).status == "cancelled"
    # The worker's own end of it, once in the log and applied by the store, changes nothing.
    assert wait_for(lambda: log_ended(stack, long.id) and projection_lag(replicas[0]) == 0,
                    timeout=120, interval=0.5)
    assert client.responses.retrieve(long.id).status == "cancelled"


def test_a_dropped_stream_resumes_on_another_replica(replicas: list[str]) -> None:
    body = {"model": DEFAULT_MODEL, "input": "Write three sentences about the sea.",
            "max_output_tokens": 40, "temperature": 0, "stream": True, "background": True}
    headers = {"Authorization": "Bearer key-alice"}
    first: list[dict] = []
    with httpx.stream("POST", f"{replicas[0]}/v1/responses", json=body, headers=headers,
                      timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                first.append(json.loads(line[5:]))
                if len(first) == 6:
                    break
    response_id = first[0]["response"]["id"]
    rest: list[dict] = []
    url = f"{replicas[1]}/v1/responses/{response_id}?stream=true&starting_after=5"
    with httpx.stream("GET", url, headers=headers, timeout=120) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                rest.append(json.loads(line[5:]))
    events = first + rest
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    # The SDK's own resume: it asks for the whole stream and filters on its side.
    client = sdk(replicas[0])
    with client.responses.stream(response_id=response_id, starting_after=5) as stream:
        replayed = [event.sequence_number for event in stream]
    assert replayed == list(range(6, len(events)))


def test_previous_response_id_chains_and_branches(replicas: list[str]) -> None:
    client = sdk(replicas[0])
    first = client.responses.create(model=DEFAULT_MODEL, input="My name is Ada. Say hi.",
                                    max_output_tokens=12, temperature=0)
    second = client.responses.create(model=DEFAULT_MODEL, input="What is my name?",
                                     previous_response_id=first.id, max_output_tokens=12,
                                     temperature=0)
    branch = client.responses.create(model=DEFAULT_MODEL, input="Say bye.",
                                     previous_response_id=first.id, max_output_tokens=8,
                                     temperature=0)
    assert second.previous_response_id == first.id and branch.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0
    items = client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data][:1] == ["message"]
    assert items.data[-1].content[0].text == "What is my name?"
    with pytest.raises(NotFoundError) as missing:
        client.responses.create(model=DEFAULT_MODEL, input="x", previous_response_id="resp_nope")
    assert missing.value.body["param"] == "previous_response_id"
    with pytest.raises(NotFoundError):
        sdk(replicas[0], "key-bob").responses.create(
            model=DEFAULT_MODEL, input="x", previous_response_id=first.id)


def test_a_stream_resumes_after_its_replica_is_killed(
    stack: Stack, redis_server: EmbeddedRedis, replicas: list[str]
) -> None:
    doomed, doomed_url = store_api(stack, redis_server, "doomed-store-api")
    body = {"model": DEFAULT_MODEL, "input": "Write three sentences about the sea.",
            "max_output_tokens": 40, "temperature": 0, "stream": True}
    headers = {"Authorization": "Bearer key-alice"}
    first: list[dict] = []
    try:
        with httpx.stream("POST", f"{doomed_url}/v1/responses", json=body, headers=headers,
                          timeout=120) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: {"):
                    first.append(json.loads(line[5:]))
                    if len(first) == 6:
                        doomed.kill()  # the replica dies mid-stream, with no goodbye
                        break
    except httpx.HTTPError:
        pass
    finally:
        doomed.kill()
    response_id = first[0]["response"]["id"]
    last = first[-1]["sequence_number"]
    rest: list[dict] = []
    url = f"{replicas[1]}/v1/responses/{response_id}?stream=true"
    with httpx.stream("GET", url, headers={**headers, "Last-Event-ID": str(last)},
                      timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                rest.append(json.loads(line[5:]))
    events = first + rest
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == events[-1]["response"]["output"][0]["content"][0]["text"]


def test_item_references_resolve_from_the_store(replicas: list[str]) -> None:
    client = sdk(replicas[0])
    first = client.responses.create(model=DEFAULT_MODEL, input="My name is Ada.",
                                    max_output_tokens=8, temperature=0)
    answer = first.output[-1]
    second = client.responses.create(
        model=DEFAULT_MODEL, max_output_tokens=8, temperature=0,
        input=[{"type": "item_reference", "id": answer.id},
               {"role": "user", "content": "Say it again."}],
    )
    alone = client.responses.create(model=DEFAULT_MODEL, input="Say it again.",
                                    max_output_tokens=8, temperature=0)
    assert second.usage.input_tokens > alone.usage.input_tokens
    with pytest.raises(NotFoundError) as missing:
        client.responses.create(model=DEFAULT_MODEL, max_output_tokens=2,
                                input=[{"type": "item_reference", "id": "msg_nothing"}])
    assert missing.value.body["param"] == "input[0].id"
    with pytest.raises(NotFoundError):
        sdk(replicas[0], "key-bob").responses.create(
            model=DEFAULT_MODEL, max_output_tokens=2,
            input=[{"type": "item_reference", "id": answer.id}])


def test_get_includes_logprobs_only_when_asked(replicas: list[str]) -> None:
    client = sdk(replicas[0])
    created = client.responses.create(model=DEFAULT_MODEL, input="Hi", max_output_tokens=4,
                                      temperature=0, include=["message.output_text.logprobs"],
                                      top_logprobs=2)
    assert created.output[-1].content[0].logprobs
    with_logprobs = client.responses.retrieve(created.id, include=["message.output_text.logprobs"])
    assert with_logprobs.output[-1].content[0].logprobs
    plain = client.responses.retrieve(created.id)
    assert plain.output[-1].content[0].logprobs == []
