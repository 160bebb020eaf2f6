"""A model whose workers are gone gets a prompt 503, not a hang; /v1/models follows."""

from __future__ import annotations

import json
import time

import httpx

from journal import JournalSettings
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for

SPARE = "spare-smollm"


def listed(stack: Stack) -> set[str]:
    reply = httpx.get(f"{stack.base_url}/v1/models", timeout=5)
    return {model["id"] for model in reply.json()["data"]}


def test_a_stopped_workers_model_is_a_503_at_once(stack: Stack) -> None:
    spare = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", SPARE, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "spare"}, "spare-worker",
    )
    try:
        assert wait_for(lambda: SPARE in listed(stack) or not spare.alive(), MODEL_LOAD_TIMEOUT, 0.5)
        assert spare.alive(), spare.output()[-3000:]
        body = {"model": SPARE, "input": "Hi", "max_output_tokens": 2, "temperature": 0}
        started = time.monotonic()
        served = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=120)
        served_s = time.monotonic() - started
        assert served.status_code == 200, served.text
    finally:
        spare.stop()
    started = time.monotonic()
    reply = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=10)
    refused_s = time.monotonic() - started
    # At once: sooner than the worker answered the same request, so waiting on no worker
    # (the withdrawal it said on its way out is seen on the bus).
    assert refused_s < served_s, (refused_s, served_s)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["param"] == "model"
    assert SPARE not in listed(stack)
    assert DEFAULT_MODEL in listed(stack)


def test_request_queued_for_a_dead_worker_fails_instead_of_hanging(stack: Stack) -> None:
    name = "doomed-smollm"
    doomed = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", name, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "doomed"}, "doomed-worker",
    )
    try:
        assert wait_for(lambda: name in listed(stack) or not doomed.alive(), MODEL_LOAD_TIMEOUT, 0.5)
    finally:
        doomed.kill()  # no goodbye: its liveness key lingers until the TTL runs out
    started = time.monotonic()
    reply = httpx.post(f"{stack.base_url}/v1/responses",
                       json={"model": name, "input": "Hi", "max_output_tokens": 2}, timeout=60)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "model_unavailable"
    # Once its liveness key has lapsed (the TTL), not after a queue's ack wait (30 s) or
    # the client's timeout.
    assert time.monotonic() - started < 1.5 * JournalSettings().worker_ttl_s


def test_a_stream_whose_last_worker_dies_ends_with_worker_lost(stack: Stack) -> None:
    name = "orphan-smollm"
    orphan = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", name, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "orphan"}, "orphan-worker",
    )
    try:
        assert wait_for(lambda: name in listed(stack) or not orphan.alive(), MODEL_LOAD_TIMEOUT, 0.5)
        body = {"model": name, "input": "Write a long story.", "max_output_tokens": 4000,
                "stream": True}
        events = []
        with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=body, timeout=120) as reply:
            lines = reply.iter_lines()
            for line in lines:
                if line.startswith("data: {") and '"response.output_text.delta"' in line:
                    break
            orphan.kill()  # the only worker of this model: nobody can continue it
            killed = time.monotonic()
            for line in lines:
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
        waited = time.monotonic() - killed
    finally:
        orphan.kill()
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"], events[-2:]
    assert events[-2]["code"] == "worker_lost"
    assert events[-1]["response"]["error"]["code"] == "worker_lost"
    # The API gives a replacement worker the ack wait (30 s) to pick the response up.
    assert waited < 30 + 10
