"""JSON logs (SPATE_LOG_FORMAT=json, as the session's API and worker run) and a W3C
traceparent that travels from the HTTP request, through the request event's NATS
headers, to the worker's log lines for that response."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx

from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_for


def json_lines(process: SpateProcess) -> list[dict[str, Any]]:
    lines = []
    for line in process.output().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def lines_of(process: SpateProcess, response_id: str) -> list[dict[str, Any]]:
    return [line for line in json_lines(process) if line.get("response_id") == response_id]


def test_the_trace_id_reaches_the_worker_log(stack: Stack) -> None:
    assert stack.worker is not None
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    reply = httpx.post(
        f"{stack.base_url}/v1/responses",
        json={"model": DEFAULT_MODEL, "input": "Say hi.", "max_output_tokens": 4},
        headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}, timeout=300,
    )
    assert reply.status_code == 200, reply.text
    response_id = reply.json()["id"]

    worker = stack.worker
    assert wait_for(lambda: len(lines_of(worker, response_id)) >= 2, 30), worker.output()[-3000:]
    for line in lines_of(worker, response_id):
        assert line["trace_id"] == trace_id
        assert {"time", "level", "logger", "message"} <= line.keys()
    api_lines = lines_of(stack.api, response_id)
    assert api_lines and all(line["trace_id"] == trace_id for line in api_lines)
    # Every line the processes logged is one JSON object (uvicorn's included).
    api_output = [line for line in stack.api.output().splitlines() if line.strip()]
    assert api_output and all(line.startswith("{") for line in api_output), api_output[:5]


def test_a_malformed_traceparent_is_ignored(stack: Stack) -> None:
    assert stack.worker is not None
    reply = httpx.post(
        f"{stack.base_url}/v1/responses",
        json={"model": DEFAULT_MODEL, "input": "Say hi.", "max_output_tokens": 2},
        headers={"traceparent": "00-not-a-trace-01"}, timeout=300,
    )
    assert reply.status_code == 200, reply.text
    response_id = reply.json()["id"]
    worker = stack.worker
    assert wait_for(lambda: len(lines_of(worker, response_id)) >= 2, 30)
    assert all("trace_id" not in line for line in lines_of(worker, response_id))
