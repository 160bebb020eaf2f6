"""The store's Redis goes away mid-stream and comes back: generation never waits on it,
reads of stored responses answer 503 meanwhile, and the projection catches up from the
log once Redis is back. A real redis-server (this module's own), the API with the store
on and the session's worker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_http

# Events handed back while Redis was down come again a second later.
CATCH_UP_S = 5.0
# The store projection's consumer: an unacknowledged event comes back after this.
PROJECTION_ACK_WAIT_S = 30.0


class RestartableRedis:
    """One redis-server on a fixed port and data folder, stopped and started again."""

    def __init__(self, store_dir: str) -> None:
        self.server = EmbeddedRedis(port=free_port(), store_dir=store_dir).start()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        self.server = EmbeddedRedis(port=self.server.port, store_dir=self.server.store_dir).start()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableRedis]:
    redis = RestartableRedis(str(tmp_path_factory.mktemp("redis")))
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="module")
def store_api(stack: Stack, redis_server: RestartableRedis) -> Iterator[str]:
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis_server.url},
                       "store-failure-api")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base_url}/ready", api, timeout=60)
        yield base_url
    finally:
        api.stop()


def stream_events(reply: httpx.Response) -> Iterator[dict]:
    for line in reply.iter_lines():
        if line.startswith("data: {"):
            yield json.loads(line[5:])


def projection_lag(base_url: str) -> float:
    """The API's `spate_store_projection_lag_events`, read from its /metrics."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith("spate_store_projection_lag_events "):
            return float(line.split()[1])
    raise AssertionError("no spate_store_projection_lag_events in /metrics")


def test_redis_down_mid_stream(store_api: str, redis_server: RestartableRedis) -> None:
    body = {"model": DEFAULT_MODEL, "input": "Write a long story about a lighthouse.",
            "max_output_tokens": 96, "ignore_eos": True, "temperature": 0, "stream": True}
    events: list[dict] = []
    with httpx.stream("POST", f"{store_api}/v1/responses", json=body, timeout=300) as reply:
        assert reply.status_code == 200
        stream = stream_events(reply)
        for event in stream:
            events.append(event)
            if sum(e["type"] == "response.output_text.delta" for e in events) == 4:
                break
        response_id = events[0]["response"]["id"]
        redis_server.stop()
        try:
            # While Redis is down: reads of stored responses say so, in OpenAI's shape...
            reply_get = httpx.get(f"{store_api}/v1/responses/{response_id}", timeout=30)
            assert reply_get.status_code == 503
            error = reply_get.json()["error"]
            assert error["code"] == "store_unavailable" and error["message"]
            # It names the dependency, never its address or its driver's words.
            assert str(redis_server.server.port) not in error["message"]
            assert "connect" not in error["message"].lower()
            # ...and a stateless request needs no store at all.
            stateless = httpx.post(f"{store_api}/v1/responses", timeout=120, json={
                "model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 3, "store": False})
            assert stateless.status_code == 200
            assert stateless.json()["status"] in ("completed", "incomplete")
            # The stream goes on untouched to its end.
            events.extend(stream)
            # Its events wait in the log for the projection, and the metric says so.
            lag_while_down = projection_lag(store_api)
        finally:
            redis_server.restart()
    assert lag_while_down > 0

    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    streamed_text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert streamed_text

    # Redis is back: the unacked events are redelivered and the projection catches up.
    deadline = time.monotonic() + CATCH_UP_S
    stored: dict = {}
    while time.monotonic() < deadline:
        reply_get = httpx.get(f"{store_api}/v1/responses/{response_id}", timeout=30)
        if reply_get.status_code == 200:
            stored = reply_get.json()
            if stored["status"] in ("completed", "incomplete"):
                break
        time.sleep(0.2)
    assert stored.get("status") in ("completed", "incomplete"), stored
    stored_text = "".join(
        part["text"] for item in stored["output"] if item["type"] == "message"
        for part in item["content"] if part["type"] == "output_text")
    assert stored_text == streamed_text
    assert stored["status"] == events[-1]["response"]["status"]
    # Caught up, the projection's lag is back to nothing: at the latest once an event that
    # was in the projector's hands when Redis went away is redelivered, after the
    # projection consumer's ack wait.
    deadline = time.monotonic() + CATCH_UP_S + PROJECTION_ACK_WAIT_S
    while projection_lag(store_api) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert projection_lag(store_api) == 0


def test_redis_refusing_is_a_503(store_api: str, redis_server: RestartableRedis) -> None:
    """A Redis that answers but refuses (here: its user lost the right to read) is a
    dependency failing: a 503 in OpenAI's shape, never a 500."""
    reply = httpx.post(f"{store_api}/v1/responses", timeout=120, json={
        "model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 3})
    assert reply.status_code == 200
    response_id = reply.json()["id"]
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", "default", "-@read", "-@scripting")
    try:
        refused = httpx.get(f"{store_api}/v1/responses/{response_id}", timeout=30)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "store_unavailable"
        assert error["message"] == "The response store is unavailable; try again shortly."
    finally:
        admin.execute_command("ACL", "SETUSER", "default", "+@all")
        admin.close()
    stored = httpx.get(f"{store_api}/v1/responses/{response_id}", timeout=30)
    assert stored.status_code == 200, stored.text
    assert stored.json()["id"] == response_id
