"""A worker told to stop (SIGTERM) mid-answer drains: past its drain timeout it hands the
response back to the queue, another worker continues the same log from the next seq, and
the client's one stream has the text of an uninterrupted run."""

from __future__ import annotations

import json

import httpx

from benchmarks.chaos import holder_of
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for

NAME = "drain-smollm"
PROMPT = "Write three sentences about the sea."
TOKENS = 60


def worker(stack: Stack, worker_id: str) -> SpateProcess:
    return SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME, "--max-num-seqs", "2"],
        # No time to finish: the drain hands every running response back at once. A
        # response it did not hand back would be redelivered only after the ack wait, long
        # past the client's read timeout.
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": worker_id,
         "SPATE_DRAIN_TIMEOUT_S": "0", "SPATE_ACK_WAIT_S": "600"},
        worker_id,
    )


def ready(process: SpateProcess) -> bool:
    return "ready: serving" in process.output() or not process.alive()


def test_a_draining_worker_hands_its_stream_to_another(stack: Stack) -> None:
    workers = {name: worker(stack, name) for name in ("drain-first", "drain-second")}
    try:
        for process in workers.values():
            assert wait_for(lambda p=process: ready(p), MODEL_LOAD_TIMEOUT, 0.5), process.output()
            assert process.alive(), process.output()
        body = {"model": NAME, "input": PROMPT, "temperature": 0, "max_output_tokens": TOKENS}
        expected = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300).json()

        events = []
        with httpx.stream("POST", f"{stack.base_url}/v1/responses",
                          json={**body, "stream": True}, timeout=120) as reply:
            lines = reply.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    events.append(json.loads(line[5:]))
                    if sum(e["type"] == "response.output_text.delta" for e in events) == 10:
                        break
            response_id = events[0]["response"]["id"]
            holder = holder_of(stack.nats_url, response_id)
            workers[holder].stop()
            (survivor,) = (process for name, process in workers.items() if name != holder)
            events.extend(json.loads(line[5:]) for line in lines if line.startswith("data: {"))
        # Drained, not killed: it stopped on its own, well within stop()'s wait.
        assert workers[holder].process.returncode == 0, workers[holder].output()
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["type"] == "response.incomplete", events[-1]
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == expected["output"][0]["content"][0]["text"]
        assert events[-1]["response"]["usage"]["output_tokens"] == TOKENS
        assert f"resuming {response_id}" in survivor.output()
    finally:
        for process in workers.values():
            process.stop()
