"""A token ledger read from spate's event log exactly once: each response's generated
tokens, model and end, kept in SQLite by a consumer outside the request path.

    python -m examples.token_ledger --db ledger.sqlite [--nats-url URL] [--name NAME]

The recipe (docs/events.md, "Consuming exactly once"):

1. A durable consumer of its own (`--name`, used by nothing else) with explicit acks:
   JetStream hands out again whatever was not acknowledged, so a crash loses nothing,
   and a restart goes on from where the last run's acknowledgements reached.
2. Each fetched batch is written in one transaction of the consumer's own database,
   together with the `(response_id, seq)` of every event in it (a primary key). An event
   delivered again (its acknowledgement was lost, or the consumer was recreated) is found
   there and its effect skipped: nothing counts twice, whatever its arrival order.
3. The batch is acknowledged only after that transaction committed.

One consumer per partition of the log, each with the same name: `partitions` lists the
streams to read (today the log is one stream, SPATE_EVENTS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from cli.nats_address import use_nats_address
from events import GenerationFailed, GenerationFinished, RequestAccepted, TokensGenerated, decode
from events.codec import EventDecodeError
from events.subjects import EVENTS_STREAM
from journal import Delivery, Journal, JournalSettings

log = logging.getLogger("spate.token_ledger")

PARTITIONS: tuple[str, ...] = (EVENTS_STREAM,)
DEFAULT_NAME = "spate-token-ledger"
FETCH_BATCH = 256
FETCH_WAIT_S = 0.5

SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (
    response_id TEXT NOT NULL, seq INTEGER NOT NULL, applied_at REAL NOT NULL,
    PRIMARY KEY (response_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS responses (
    response_id TEXT PRIMARY KEY, model TEXT, output_tokens INTEGER NOT NULL DEFAULT 0,
    finish TEXT, reported_output_tokens INTEGER);
"""


class TokenLedger:
    """The consumer's own database. `write` applies a batch of events in one transaction,
    each at most once; the effects are increments, so applying one twice would show."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def write(self, events: Sequence[Any]) -> int:
        """Apply `events` in one transaction; how many had not been applied before."""
        fresh = 0
        now = time.time()
        with contextlib.closing(self._db.cursor()) as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                for event in events:
                    cursor.execute("INSERT OR IGNORE INTO applied VALUES (?, ?, ?)",
                                   (event.response_id, event.seq, now))
                    if cursor.rowcount == 1:  # seen before: its effect is in already
                        self._apply(cursor, event)
                        fresh += 1
                cursor.execute("COMMIT")
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
        return fresh

    @staticmethod
    def _apply(cursor: sqlite3.Cursor, event: Any) -> None:
        upsert = ("INSERT INTO responses (response_id, {column}) VALUES (?, ?) "
                  "ON CONFLICT (response_id) DO UPDATE SET {update}")
        if isinstance(event, RequestAccepted):
            cursor.execute(upsert.format(column="model", update="model = excluded.model"),
                           (event.response_id, event.model))
        elif isinstance(event, TokensGenerated):
            cursor.execute(upsert.format(
                column="output_tokens", update="output_tokens = output_tokens + excluded.output_tokens"),
                (event.response_id, len(event.token_ids)))
        elif isinstance(event, GenerationFinished):
            cursor.execute(upsert.format(column="finish", update="finish = excluded.finish"),
                           (event.response_id, event.finish_reason))
            cursor.execute("UPDATE responses SET reported_output_tokens = ? WHERE response_id = ?",
                           (event.usage.output_tokens, event.response_id))
        elif isinstance(event, GenerationFailed):
            cursor.execute(upsert.format(column="finish", update="finish = excluded.finish"),
                           (event.response_id, f"failed: {event.code}"))

    def prune(self, older_than_s: float) -> None:
        """Forget the `(response_id, seq)` of events applied over `older_than_s` ago. Safe
        once that is at least the log's retention (SPATE_EVENTS_MAX_AGE_S): such an event
        is gone from the stream, so it cannot be delivered again."""
        self._db.execute("DELETE FROM applied WHERE applied_at < ?", (time.time() - older_than_s,))

    def responses(self) -> dict[str, tuple[str | None, int, str | None, int | None]]:
        """response id -> (model, output tokens counted, finish, output tokens reported)."""
        rows = self._db.execute(
            "SELECT response_id, model, output_tokens, finish, reported_output_tokens FROM responses")
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    def totals(self) -> dict[str, int]:
        """Output tokens per model."""
        rows = self._db.execute(
            "SELECT coalesce(model, '(unknown)'), sum(output_tokens) FROM responses GROUP BY 1")
        return {model: int(tokens) for model, tokens in rows}


async def consume(journal: Journal, ledger: TokenLedger, partition: str, name: str,
                  stop: asyncio.Event, ack_wait_s: float = 30.0) -> None:
    """Read one partition of the log into `ledger` until `stop` is set."""
    feed = await journal.event_feed(name, ack_wait_s, stream=partition)
    try:
        while not stop.is_set():
            deliveries = await feed.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S)
            events = []
            for delivery in deliveries:
                event = await _decoded(delivery)
                if event is not None:
                    events.append(event)
            ledger.write(events)  # committed before anything is acknowledged
            for delivery in deliveries:
                await delivery.ack()
    finally:
        await feed.close()


async def _decoded(delivery: Delivery) -> Any | None:
    try:
        return decode(delivery.data)
    except EventDecodeError as error:  # a newer version's event: never delivered again
        log.error("skipping an event this version cannot read: %s", error)
        await delivery.term()
        return None


async def run(settings: JournalSettings, db_path: str, stop: asyncio.Event,
              partitions: Sequence[str] = PARTITIONS, name: str = DEFAULT_NAME,
              ack_wait_s: float = 30.0) -> None:
    ledger = TokenLedger(db_path)
    journal = Journal(settings, name=name)
    journal.start()
    try:
        if await journal.wait_connected(stop):
            await asyncio.gather(*(consume(journal, ledger, partition, name, stop, ack_wait_s)
                                   for partition in partitions))
    finally:
        await journal.close()
        ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the SQLite file of the ledger")
    parser.add_argument("--nats-url", default=None)
    parser.add_argument("--name", default=DEFAULT_NAME, help="the durable consumer's name")
    parser.add_argument("--partitions", nargs="+", default=list(PARTITIONS),
                        help="the streams of the log to read")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    settings = JournalSettings()
    use_nats_address(settings, args.nats_url)

    async def main_async() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run(settings, args.db, stop, args.partitions, args.name)

    asyncio.run(main_async())


if __name__ == "__main__":
    main()
