"""Following the streams (`Journal.tail_*`, `spate events tail`) and reading a consumer's
backlog, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

from cli.nats_server import EmbeddedNats
from events import GenerationFinished, GenerationStarted, TokensGenerated, Usage
from events.subjects import (
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    REQUESTS_STREAM,
    request_subject,
)
from harness.waits import until
from journal import Journal, TailedMessage
from tests.journal.conftest import readers
from tests.journal.test_log_reader import request
from tests.processes import ROOT


async def take(messages: AsyncIterator[TailedMessage], count: int, timeout: float = 20) -> list[Any]:
    taken = []

    async def read() -> None:
        async for message in messages:
            taken.append(message.event)
            if len(taken) == count:
                return

    await asyncio.wait_for(read(), timeout)
    return taken


async def write_response(journal: Journal, response_id: str, model: str = "tail-model") -> None:
    await journal.publish_request(request(response_id, model))
    writer = journal.writer(response_id, 1, await journal.take_lease(response_id))
    await writer.publish(GenerationStarted, worker_id="w", input_tokens=2)
    await writer.publish(TokensGenerated, channel="text", text="hi", token_ids=(7,))
    await writer.publish(GenerationFinished, finish_reason="stop",
                         usage=Usage(input_tokens=2, output_tokens=1))
    await writer.flush()


async def test_one_response_from_its_start(journal: Journal) -> None:
    await write_response(journal, "resp_tail_one")
    events = await take(journal.tail_response("resp_tail_one"), 4)
    assert [event.seq for event in events] == [0, 1, 2, 3]
    assert events[-1].type == "generation.finished"


async def test_new_events_and_one_models_requests(journal: Journal) -> None:
    followed = [(EVENTS_STREAM, f"{EVENTS_SUBJECT_PREFIX}.>"),
                (REQUESTS_STREAM, request_subject("tail-model-a"))]
    before = [await readers(journal, *stream_subject) for stream_subject in followed]
    everything = journal.tail_events()
    requests = journal.tail_requests("tail-model-a")
    first_all = asyncio.ensure_future(take(everything, 8))
    first_request = asyncio.ensure_future(take(requests, 1))

    async def both_subscribed() -> bool:
        now = [await readers(journal, *stream_subject) for stream_subject in followed]
        return all(current - earlier for current, earlier in zip(now, before, strict=True))

    # Both consumers exist before anything is written.
    assert await until(both_subscribed, timeout=20)
    await write_response(journal, "resp_tail_b", model="tail-model-b")
    await write_response(journal, "resp_tail_a", model="tail-model-a")
    seen = await first_all
    assert [(e.response_id, e.seq) for e in seen] == (
        [("resp_tail_b", seq) for seq in range(4)] + [("resp_tail_a", seq) for seq in range(4)]
    )
    (accepted,) = await first_request
    assert accepted.response_id == "resp_tail_a" and accepted.model == "tail-model-a"


async def test_a_request_queue_backlog(journal: Journal) -> None:
    model = "backlog-model"
    assert await journal.request_backlog(model) is None
    queue = await journal.request_queue(model, ack_wait_s=30, max_deliver=3)
    try:
        await journal.publish_request(request("resp_backlog_1", model))
        await journal.publish_request(request("resp_backlog_2", model))
        backlog = await journal.request_backlog(model)
        assert backlog is not None and (backlog.pending, backlog.ack_pending) == (2, 0)
        (delivery,) = await queue.fetch(batch=1, timeout=5)
        backlog = await journal.request_backlog(model)
        assert backlog is not None and (backlog.pending, backlog.ack_pending) == (1, 1)
        await delivery.ack()
    finally:
        await queue.close()
    assert 0 < await journal.rtt() < 5


async def test_the_tail_command(journal: Journal, nats_server: EmbeddedNats) -> None:
    await write_response(journal, "resp_tail_cli")
    command = [sys.executable, "-m", "cli.main", "events", "tail", "--nats-url", nats_server.url]
    as_json = await asyncio.to_thread(
        subprocess.run, [*command, "--response", "resp_tail_cli", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert as_json.returncode == 0, as_json.stderr
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(line["type"], line["seq"]) for line in lines] == [
        ("request.accepted", 0), ("generation.started", 1), ("tokens.generated", 2),
        ("generation.finished", 3),
    ]
    plain = await asyncio.to_thread(
        subprocess.run, [*command, "--model", "tail-model", "--from-start", "--count", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split()[1:4] == ["0", "request.accepted", "model=tail-model"], plain.stdout
