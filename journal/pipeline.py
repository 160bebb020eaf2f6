"""Pipelined JetStream publishes: many in flight, each with a future for its ack.

nats-py's `publish_async` leaves a future pending forever when JetStream answers with an
error (a fenced publish, `wrong last sequence`), so a writer could not tell a refused
event from a slow one. This one resolves every answer: an ack or the `APIError`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import APIError

from journal.connection import Connection

# The JetStream error code of a publish whose expected last sequence did not hold.
WRONG_LAST_SEQUENCE = 10071


def is_fenced(error: BaseException | None) -> bool:
    """Whether `error` is JetStream refusing a publish because a newer lease exists."""
    return _wrong_last_sequence(error) not in (None, 0)


def lease_lost(error: BaseException | None) -> bool:
    """Whether `error` is JetStream refusing a publish because no lease exists at all:
    the server came back without its data, so nobody else can hold the log either."""
    return _wrong_last_sequence(error) == 0


def _wrong_last_sequence(error: BaseException | None) -> int | None:
    """The lease subject's actual last sequence a refused publish reports, or None."""
    if not isinstance(error, APIError) or error.err_code != WRONG_LAST_SEQUENCE:
        return None
    try:  # "wrong last sequence: 4"
        return int(str(error.description).rsplit(":", 1)[-1])
    except ValueError:
        return -1


class PublishPipeline:
    """One per connection; a reply subscription resolves the futures by token."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._futures: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tokens = itertools.count()
        self._prefix: str | None = None
        self._subscribed_on: Client | None = None

    @property
    def connected(self) -> bool:
        return self._connection.connected

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> asyncio.Future[dict[str, Any]]:
        nc = self._connection.client()
        if self._subscribed_on is not nc:
            self._prefix = nc.new_inbox()
            await nc.subscribe(f"{self._prefix}.*", cb=self._on_reply)
            self._subscribed_on = nc
        token = str(next(self._tokens))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        future.add_done_callback(lambda _: self._futures.pop(token, None))
        await nc.publish(subject, payload, reply=f"{self._prefix}.{token}", headers=headers)
        return future

    async def _on_reply(self, msg: Msg) -> None:
        future = self._futures.get(msg.subject.rsplit(".", 1)[-1])
        if future is None or future.done():
            return
        if not msg.data:  # a status message: no stream answered (NATS restarting)
            future.set_exception(APIError(code=503, description="no stream answered"))
            return
        try:
            answer = json.loads(msg.data)
        except ValueError as error:
            future.set_exception(error)
            return
        if "error" in answer:
            future.set_exception(APIError(**answer["error"]))
        else:
            future.set_result(answer)
