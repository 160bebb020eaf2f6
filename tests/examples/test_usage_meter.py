"""The usage-metering example reads real logs from a real nats-server."""

from __future__ import annotations

import asyncio

import pytest

from cli.nats_server import EmbeddedNats
from events import GenerationFailed, GenerationFinished, Usage
from events.subjects import EVENTS_STREAM, EVENTS_SUBJECT_PREFIX
from examples.usage_meter import ModelUsage, UsageMeter, run
from harness.waits import until
from journal import Journal, JournalSettings
from tests.journal.conftest import connect, readers
from tests.journal.test_log_reader import request


async def test_usage_per_model_from_the_log(
    nats_server: EmbeddedNats, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = await connect(nats_server.url)
    events = (EVENTS_STREAM, f"{EVENTS_SUBJECT_PREFIX}.>")
    before = await readers(journal, *events)
    stop = asyncio.Event()
    meter_task = asyncio.ensure_future(
        run(JournalSettings(nats_url=nats_server.url), from_start=False, every_s=0.2, stop=stop)
    )
    try:
        # The meter follows from now on.
        assert await until(lambda: new_reader(journal, events, before), timeout=20)
        for number, (model, output_tokens) in enumerate(
            [("meter-a", 5), ("meter-b", 7), ("meter-a", 11)]
        ):
            response_id = f"resp_meter_{number}"
            await journal.publish_request(request(response_id, model))
            writer = journal.writer(response_id, 1, await journal.take_lease(response_id))
            await writer.publish(GenerationFinished, finish_reason="stop", usage=Usage(
                input_tokens=3, output_tokens=output_tokens, reasoning_tokens=2))
            await writer.flush()
        await journal.publish_request(request("resp_meter_failed", "meter-b"))
        failing = journal.writer("resp_meter_failed", 1, await journal.take_lease("resp_meter_failed"))
        await failing.publish(GenerationFailed, code="engine_error", message="boom")
        await failing.flush()
        # Until the meter's report (printed every 0.2 s) counts all of them.
        assert await until(lambda: counted_all(capsys), timeout=20)
    finally:
        stop.set()
        meter = await asyncio.wait_for(meter_task, 20)
        await journal.close()
    assert meter.usage == {
        "meter-a": ModelUsage(responses=2, input_tokens=6, output_tokens=16, reasoning_tokens=4),
        "meter-b": ModelUsage(responses=1, failed=1, input_tokens=3, output_tokens=7,
                              reasoning_tokens=2),
    }
    assert "meter-a 2 0 6 16 4 0" in meter.report()


async def new_reader(journal: Journal, events: tuple[str, str], before: set[str]) -> bool:
    return bool(await readers(journal, *events) - before)


def counted_all(capsys: pytest.CaptureFixture[str]) -> bool:
    report = capsys.readouterr().out
    return "meter-a 2 0 6 16 4 0" in report and "meter-b 1 1 3 7 2 0" in report


def test_a_response_counts_once() -> None:
    meter = UsageMeter()
    accepted = request("resp_twice", "m")
    finished = GenerationFinished(response_id="resp_twice", seq=1, finish_reason="stop",
                                  usage=Usage(input_tokens=1, output_tokens=2))
    for event in (accepted, finished, accepted, finished):
        meter.apply(event)
    assert meter.usage["m"].responses == 1
