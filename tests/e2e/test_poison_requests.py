"""A request that stops every worker that prepares it ends: after SPATE_MAX_PREPARE_TRIES
deliveries that no worker finished preparing, the next worker fails it with
response.failed instead of building it (and perhaps going down) once more.

The deliveries before are taken by a consumer of the model's real request queue that
hands each back without preparing it: what a worker killed while building the prompt
leaves behind. Then a real worker takes the request."""

from __future__ import annotations

import asyncio
import uuid

from events import ChatMessage, GenerationFailed, GenerationFinished, RequestAccepted
from journal import Journal, JournalSettings
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for

NAME = "poison-smollm"
TRIES = 2


async def publish_and_drop(nats_url: str, response_id: str) -> None:
    """Publish the request, then take it TRIES times and hand it back unprepared."""
    settings = JournalSettings(nats_url=nats_url)
    journal = Journal(settings, name="poison-test")
    journal.start()
    try:
        assert await journal.wait_connected()
        queue = await journal.request_queue(NAME, settings.ack_wait_s, settings.max_deliver)
        try:
            await journal.publish_request(RequestAccepted(
                response_id=response_id, seq=0, model=NAME, created_at=1000.0,
                messages=(ChatMessage(role="user", content="Hi"),),
            ))
            for _ in range(TRIES):
                deliveries = await queue.fetch(batch=1, timeout=30)
                assert deliveries, "the request was not delivered"
                await deliveries[0].nak()
        finally:
            await queue.close()
    finally:
        await journal.close()


async def ended_log(nats_url: str, response_id: str, timeout: float) -> list:
    """The response's log once it holds its terminal event."""
    journal = Journal(JournalSettings(nats_url=nats_url), name="poison-reader")
    journal.start()
    try:
        assert await journal.wait_connected()
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            log = await journal.read_log(response_id)
            if isinstance(log[-1], (GenerationFailed, GenerationFinished)):
                return log
            await asyncio.sleep(0.5)
        raise TimeoutError(f"{response_id} did not end")
    finally:
        await journal.close()


def test_a_request_no_worker_could_prepare_fails_instead_of_running_again(stack: Stack) -> None:
    response_id = f"resp_poison_{uuid.uuid4().hex}"
    asyncio.run(publish_and_drop(stack.nats_url, response_id))
    worker = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "poison-worker",
         "SPATE_MAX_PREPARE_TRIES": str(TRIES)}, "poison-worker",
    )
    try:
        log = asyncio.run(ended_log(stack.nats_url, response_id, MODEL_LOAD_TIMEOUT))
        assert [event.type for event in log] == ["request.accepted", "generation.failed"]
        failure = log[-1]
        assert isinstance(failure, GenerationFailed)
        assert failure.code == "server_error" and f"in {TRIES} tries" in failure.message
        # The worker goes on serving.
        assert wait_for(lambda: "ready: serving" in worker.output(), 30, 0.5)
        assert worker.alive(), worker.output()
    finally:
        worker.stop()
