"""A worker killed mid-answer: the request is redelivered, another worker continues the
same log from the next seq, and the client's one stream has nothing lost or repeated and
the text of an uninterrupted run."""

from __future__ import annotations

import asyncio
import json
import re

import httpx

from benchmarks.chaos import holder_of
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.e2e.replay import replayed_sse
from tests.processes import SpateProcess, wait_for

NAME = "crash-smollm"
PROMPT = "Write three sentences about the sea."
TOKENS = 60


def worker(stack: Stack, worker_id: str) -> SpateProcess:
    return SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": worker_id, "SPATE_ACK_WAIT_S": "3"},
        worker_id,
    )


def live(stack: Stack) -> bool:
    models = httpx.get(f"{stack.base_url}/v1/models", timeout=5).json()["data"]
    return any(model["id"] == NAME for model in models)


def ready(process: SpateProcess) -> bool:
    return "ready: serving" in process.output() or not process.alive()


def test_stream_survives_a_worker_kill(stack: Stack) -> None:
    """Two workers serve the model; the one holding the stream is killed mid-answer and the
    other continues it with the uninterrupted run's exact text (docs/reliability.md)."""
    workers = {name: worker(stack, name) for name in ("crash-first", "crash-second")}
    try:
        for process in workers.values():
            assert wait_for(lambda p=process: ready(p), MODEL_LOAD_TIMEOUT, 0.5), process.output()
            assert process.alive(), process.output()
        assert live(stack)
        body = {"model": NAME, "input": PROMPT, "temperature": 0, "max_output_tokens": TOKENS}
        expected = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300).json()

        events = []
        raw: list[str] = []  # every line as sent, to compare with the stored log's replay
        with httpx.stream("POST", f"{stack.base_url}/v1/responses",
                          json={**body, "stream": True}, timeout=300) as reply:
            lines = reply.iter_lines()
            for line in lines:
                raw.append(line)
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
                    deltas = sum(e["type"] == "response.output_text.delta" for e in events)
                    if deltas == 10:
                        break
            response_id = events[0]["response"]["id"]
            holder = holder_of(stack.nats_url, response_id)
            workers[holder].kill()
            (survivor,) = (process for name, process in workers.items() if name != holder)
            for line in lines:
                raw.append(line)
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["type"] == "response.incomplete", events[-1]
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        final = events[-1]["response"]
        assert text == final["output"][0]["content"][0]["text"]
        assert text == expected["output"][0]["content"][0]["text"]
        assert final["usage"]["output_tokens"] == TOKENS
        assert f"resuming {response_id}" in survivor.output()
        # The log two workers wrote folds to exactly what the client was sent.
        replayed = asyncio.run(replayed_sse(stack.nats_url, final["id"]))
        # (keep-alive comments, one line and a blank one each, are not events)
        sent = re.sub(r"(?m)^:[^\n]*\n\n", "", "\n".join(raw)).strip()
        assert re.sub(r"\r?\n", "\n", replayed.decode()).strip() == sent
    finally:
        for process in workers.values():
            process.stop()
