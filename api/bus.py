"""The API's side of NATS: publishing requests and cancels, following a response's log,
and reading the model registry. Owns the connection; reconnects by itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Literal

import nats
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError, NotFoundError

from api.errors import BusUnavailable
from api.event_log import EventLog
from api.settings import ApiSettings
from events import CancelRequested, ModelCard, RequestAccepted, decode, encode
from events.streams import ensure_streams
from events.subjects import (
    EVENTS_STREAM,
    MODELS_BUCKET,
    WORKERS_BUCKET,
    cancel_subject,
    event_msg_id,
    events_subject,
    model_key,
    request_subject,
)

log = logging.getLogger("spate.api.bus")

# Registry answers reused on the request path; a card changes only when a worker with a
# different build of the model starts.
CARD_CACHE_S = 5.0
LIVE_CACHE_S = 0.5


class Bus:
    def __init__(self, settings: ApiSettings) -> None:
        self._settings = settings
        self._nc: Any = None
        self._js: Any = None
        self._models: Any = None
        self._workers: Any = None
        self._ready = asyncio.Event()
        self._connector: asyncio.Task[None] | None = None
        # Cancels sent from places that cannot await (a stream torn down by a
        # disconnect); referenced here until they finish.
        self._pending: set[asyncio.Task[None]] = set()
        self._cards: dict[str, tuple[float, ModelCard]] = {}
        self._live_until: dict[str, float] = {}

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background: the API serves (with 503s) while NATS is away."""
        self._connector = asyncio.create_task(self._connect_until_up())

    async def _connect_until_up(self) -> None:
        delay = 0.2
        while True:
            try:
                nc = await nats.connect(
                    self._settings.nats_url,
                    name="spate-api",
                    connect_timeout=self._settings.nats_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                )
                js = nc.jetstream(timeout=self._settings.nats_timeout_s)
                await ensure_streams(js, self._settings.events_max_age_s, self._settings.worker_ttl_s)
                self._nc, self._js = nc, js
                self._models = await js.key_value(MODELS_BUCKET)
                self._workers = await js.key_value(WORKERS_BUCKET)
                self._ready.set()
                log.info("connected to NATS at %s", self._settings.nats_url)
                return
            except Exception as error:  # keep trying: NATS may come up after the API
                log.warning("NATS at %s not reachable (%s); retrying", self._settings.nats_url, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        if self._connector is not None:
            self._connector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connector
        if self._nc is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await self._nc.drain()

    @property
    def connected(self) -> bool:
        return self._ready.is_set() and self._nc is not None and self._nc.is_connected

    async def _on_error(self, error: Exception) -> None:
        log.warning("NATS error: %s", error)

    async def _on_disconnected(self) -> None:
        log.warning("disconnected from NATS")

    async def _on_reconnected(self) -> None:
        log.info("reconnected to NATS")

    def _require(self) -> Any:
        if not self.connected:
            raise BusUnavailable("The message bus (NATS) is unavailable.")
        return self._js

    # -- publishing --------------------------------------------------------------------

    async def publish_request(self, event: RequestAccepted) -> None:
        """Write seq 0 of the response's log, then hand the request to the workers.

        The log is written first so a worker never runs a request whose log is missing.
        Both publishes carry a Nats-Msg-Id, so a retry after a timeout is not doubled.
        """
        js = self._require()
        payload = encode(event)
        try:
            # Both go out back to back on one connection and their acks are awaited
            # together: one round trip instead of two.
            acks = [
                await js.publish_async(
                    events_subject(event.response_id), payload,
                    headers={"Nats-Msg-Id": event_msg_id(event.response_id, 0)},
                ),
                await js.publish_async(
                    request_subject(event.model), payload,
                    headers={"Nats-Msg-Id": event.response_id},
                ),
            ]
            await asyncio.wait_for(asyncio.gather(*acks), self._settings.nats_timeout_s)
        except Exception as error:
            raise BusUnavailable(f"Could not publish the request: {error}") from error

    async def cancel(
        self, response_id: str, reason: Literal["client_disconnected", "requested"]
    ) -> None:
        js = self._require()
        event = CancelRequested(response_id=response_id, seq=0, reason=reason)
        await js.publish(
            cancel_subject(response_id), encode(event),
            headers={"Nats-Msg-Id": f"{response_id}:cancel"},
        )

    def cancel_soon(
        self, response_id: str, reason: Literal["client_disconnected", "requested"]
    ) -> None:
        async def publish() -> None:
            try:
                await self.cancel(response_id, reason)
            except Exception as error:  # the worker still stops at max_output_tokens
                log.warning("could not publish the cancel of %s: %s", response_id, error)

        task = asyncio.create_task(publish())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- reading -----------------------------------------------------------------------

    async def follow(self, response_id: str) -> EventLog:
        """Start receiving the response's events; call before publishing its request."""
        self._require()
        log_ = EventLog(self, response_id)
        await log_.start()
        return log_

    async def subscribe_live(self, subject: str, callback: Any) -> Any:
        """A plain subscription: every message JetStream stores on `subject` from now on
        is also delivered here, with no consumer to create on the server."""
        return await self._nc.subscribe(subject, cb=callback)

    async def last_seq(self, response_id: str) -> int:
        """The highest seq stored in the response's log, or -1."""
        js = self._require()
        try:
            msg = await js.get_last_msg(EVENTS_STREAM, events_subject(response_id))
        except NotFoundError:
            return -1
        return int(decode(msg.data).seq)

    async def replay(self, response_id: str, up_to_seq: int, timeout: float) -> list[Any]:
        """Read the stored log from seq 0 through `up_to_seq` (an ordered consumer)."""
        js = self._require()
        subscription = await js.subscribe(
            events_subject(response_id), stream=EVENTS_STREAM, ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        events: list[Any] = []
        try:
            while not events or max(event.seq for event in events[-1:]) < up_to_seq:
                msg = await subscription.next_msg(timeout=timeout)
                events.append(decode(msg.data))
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        return events

    async def response_exists(self, response_id: str) -> bool:
        js = self._require()
        try:
            await js.get_last_msg(EVENTS_STREAM, events_subject(response_id))
        except NotFoundError:
            return False
        except Exception as error:
            raise BusUnavailable(f"Could not read the event log: {error}") from error
        return True

    async def model_card(self, model: str) -> ModelCard | None:
        self._require()
        cached = self._cards.get(model)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            entry = await self._models.get(model_key(model))
        except KeyNotFoundError:
            return None
        except Exception as error:
            raise BusUnavailable(f"Could not read the model registry: {error}") from error
        card = ModelCard.model_validate_json(entry.value) if entry.value else None
        if card is not None:
            self._cards[model] = (time.monotonic() + CARD_CACHE_S, card)
        return card

    async def is_live(self, model: str) -> bool:
        """Whether some worker heartbeat for `model` is current. A yes is remembered
        briefly (a hot path); a no never is, so a worker coming back is seen at once."""
        self._require()
        if self._live_until.get(model, 0.0) > time.monotonic():
            return True
        try:
            await self._workers.get(model_key(model))
        except KeyNotFoundError:
            return False
        except Exception as error:
            raise BusUnavailable(f"Could not read the worker registry: {error}") from error
        self._live_until[model] = time.monotonic() + LIVE_CACHE_S
        return True

    async def live_models(self) -> list[ModelCard]:
        self._require()
        try:
            keys = await self._workers.keys()
        except Exception:  # the client raises when the bucket is empty
            return []
        cards = []
        for key in keys:
            with contextlib.suppress(KeyNotFoundError):
                entry = await self._models.get(key)
                cards.append(ModelCard.model_validate_json(entry.value))
        return cards
