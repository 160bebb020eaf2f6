"""The exactly-once recipe (examples/token_ledger.py) against a real nats-server: every
token counts once in the consumer's own database across a clean restart, a consumer
whose acknowledgements were all lost (everything delivered again), and a process killed
with SIGKILL mid-stream and started again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from cli.nats_server import EmbeddedNats
from events import GenerationFinished, GenerationStarted, TokensGenerated, Usage
from events.subjects import EVENTS_STREAM
from examples.token_ledger import TokenLedger, run
from harness.waits import until
from journal import Journal, JournalSettings
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request

ROOT = Path(__file__).resolve().parents[2]
NAME = "ledger-test"


def expected(index: int) -> tuple[str, int]:
    """(model, output tokens) of response number `index`."""
    return ("ledger-a" if index % 2 else "ledger-b"), 2 * (index % 5 + 1)


async def write_responses(journal: Journal, numbers: range) -> None:
    for index in numbers:
        response_id = f"resp_ledger_{index}"
        model, tokens = expected(index)
        await journal.publish_request(request(response_id, model))
        writer = journal.writer(response_id, 1, await journal.take_lease(response_id))
        await writer.publish(GenerationStarted, worker_id="w", input_tokens=3)
        for step in range(tokens // 2):  # two tokens an event
            await writer.publish(TokensGenerated, channel="text", text=f"{step} ",
                                 token_ids=(step, step + 1))
        await writer.publish(GenerationFinished, finish_reason="stop",
                             usage=Usage(input_tokens=3, output_tokens=tokens))
        await writer.flush()


def check(db: str, count: int) -> None:
    ledger = TokenLedger(db)
    try:
        rows = ledger.responses()
        assert rows == {f"resp_ledger_{index}": (expected(index)[0], expected(index)[1], "stop",
                                                 expected(index)[1]) for index in range(count)}
        totals: dict[str, int] = {}
        for index in range(count):
            model, tokens = expected(index)
            totals[model] = totals.get(model, 0) + tokens
        assert ledger.totals() == totals
    finally:
        ledger.close()


def finished(db: str, count: int) -> Callable[[], bool]:
    def done() -> bool:
        ledger = TokenLedger(db)
        try:
            return sum(row[2] == "stop" for row in ledger.responses().values()) >= count
        finally:
            ledger.close()

    return done


async def test_each_token_counts_once_across_restarts_and_redeliveries(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    with EmbeddedNats() as server:  # a log of its own: the ledger reads it from its start
        journal = await connect(server.url, name="ledger-writer")
        settings = JournalSettings(nats_url=server.url)
        try:
            await write_responses(journal, range(4))  # before the ledger's first run
            stop = asyncio.Event()
            ledger = asyncio.create_task(run(settings, db, stop, name=NAME, ack_wait_s=2))
            assert await until(finished(db, 4), 30)
            stop.set()
            await asyncio.wait_for(ledger, 20)
            check(db, 4)

            await write_responses(journal, range(4, 8))  # while it is down
            # Every acknowledgement lost: the consumer recreated from the start of the log,
            # so each event already applied is delivered again.
            await journal.connection.require().delete_consumer(EVENTS_STREAM, NAME)
            stop = asyncio.Event()
            ledger = asyncio.create_task(run(settings, db, stop, name=NAME, ack_wait_s=2))
            assert await until(finished(db, 8), 30)
            await write_responses(journal, range(8, 10))  # and while it runs
            assert await until(finished(db, 10), 30)
            stop.set()
            await asyncio.wait_for(ledger, 20)
            check(db, 10)
        finally:
            await journal.close()


async def test_a_consumer_killed_mid_stream_counts_each_token_once(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    total = 40

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.token_ledger", "--db", db, "--nats-url", server.url,
             "--name", NAME], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    with EmbeddedNats() as server:
        journal = await connect(server.url, name="ledger-writer")
        consumer = start()
        try:
            writing = asyncio.create_task(write_responses(journal, range(total)))
            assert await until(finished(db, 3), 60)
            consumer.send_signal(signal.SIGKILL)  # no goodbye: unacknowledged events stay so
            consumer.wait()
            await writing
            consumer = start()
            assert await until(finished(db, total), 60)
            check(db, total)
        finally:
            consumer.send_signal(signal.SIGTERM)
            consumer.wait(timeout=30)
            await journal.close()
