"""Counting a would-be request's input tokens: a request-reply from the API to one of the
model's workers, since only workers hold the tokenizer and the chat template."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from events import RequestAccepted, decode, encode
from events.subjects import count_subject, counters_queue
from journal.errors import CountRefused, JournalUnavailable
from journal.writer import check_payload_size

log = logging.getLogger("spate.journal.counts")

# Rendering a long conversation through a chat template takes longer than one NATS
# round trip, so a count gets its own limit.
COUNT_TIMEOUT_S = 30.0

CountHandler = Callable[[RequestAccepted], Awaitable[int]]


async def request_count(nc: Client, event: RequestAccepted) -> int:
    """The prompt length one of `event.model`'s workers builds for `event`."""
    payload = encode(event)
    check_payload_size(payload, nc.max_payload)
    try:
        reply = await nc.request(count_subject(event.model), payload, timeout=COUNT_TIMEOUT_S)
    except NoRespondersError:
        raise CountRefused("model_unavailable",
                           f"No worker is serving the model '{event.model}' right now.",
                           "model") from None
    except NatsTimeoutError:
        raise CountRefused("model_unavailable",
                           f"No worker serving the model '{event.model}' answered in time.",
                           "model") from None
    except Exception as error:
        raise JournalUnavailable(f"Could not ask for a token count: {error}") from error
    answer = json.loads(reply.data)
    if "error" in answer:
        refusal = answer["error"]
        raise CountRefused(refusal["code"], refusal["message"], refusal.get("param"))
    return int(answer["input_tokens"])


class CountServer:
    """Answers `model`'s count requests (one worker of the queue group gets each), each
    in its own task so a long render does not hold up the next."""

    def __init__(self, handler: CountHandler) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()

    async def on_message(self, msg: Msg) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            request = decode(msg.data)
            if not isinstance(request, RequestAccepted):
                raise CountRefused("invalid_value", "A count needs a request event.")
            answer: dict[str, Any] = {"input_tokens": await self._handler(request)}
        except CountRefused as refused:
            answer = {"error": {"code": refused.code, "message": refused.message,
                                "param": refused.param}}
        except Exception as error:
            log.exception("counting input tokens failed")
            answer = {"error": {"code": "server_error",
                                "message": f"Counting failed: {error}", "param": None}}
        try:
            await msg.respond(json.dumps(answer).encode())
        except Exception as error:  # the asker gave up or NATS went away
            log.warning("could not answer a count: %s", error)


async def serve_counts(nc: Client, model: str, handler: CountHandler) -> Subscription:
    server = CountServer(handler)
    return await nc.subscribe(count_subject(model), queue=counters_queue(model),
                              cb=server.on_message)
