"""The model registry and worker liveness, in JetStream key-value buckets.

MODELS holds one card per served model (name, context length, reasoning markers). WORKERS
holds one key per (model, worker), `<model>.<worker>`, with the bucket's TTL: each worker
renews its own key, so one worker stopping never makes a model look gone while another
still serves it. LOAD_FAILURES holds, per model, the latest failure of a worker to load
it (with a TTL), so a model that cannot load is not mistaken for one nobody serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from events import ModelCard, ModelLoadFailure
from events.subjects import (
    LOAD_FAILURES_BUCKET,
    MODELS_BUCKET,
    WORKERS_BUCKET,
    model_key,
    subject_token,
)
from journal.connection import Connection
from journal.errors import JournalUnavailable

# Registry answers reused on the request path; a card changes only when a worker with a
# different build of the model starts.
CARD_CACHE_S = 5.0
# A model seen live this recently (a liveness read, or a worker's heartbeat seen on the
# bus) is live without a read: longer than a worker's heartbeat period, so a served
# model's requests wait on no registry round trip, and well within the liveness TTL, so
# the answer is no staler than a read's. A worker's withdrawal, seen on the bus, ends it
# at once.
LIVE_CACHE_S = 3.0


def liveness_key(model: str, worker_id: str) -> str:
    return f"{model_key(model)}.{subject_token(worker_id)}"


class Registry:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._cards: dict[str, tuple[float, ModelCard]] = {}
        # When each model (by its registry key) was last seen live (time.monotonic()).
        self._live_seen: dict[str, float] = {}
        # When a withdrawal of each model's worker was last seen: a read that began
        # before it may have seen the key, and is not remembered.
        self._withdrawn_at: dict[str, float] = {}
        self._watching = False
        # One liveness read per model at a time: a burst of requests shares it.
        self._live_checks: dict[str, asyncio.Future[bool]] = {}

    async def _bucket(self, name: str) -> KeyValue:
        js = self._connection.require()
        try:
            return await js.key_value(name)
        except Exception as error:
            raise JournalUnavailable(f"Could not open the registry bucket {name}: {error}") from error

    # -- the workers' side -------------------------------------------------------------

    async def advertise(self, card: ModelCard) -> None:
        models = await self._bucket(MODELS_BUCKET)
        await models.put(model_key(card.name), card.model_dump_json().encode())

    async def heartbeat(self, model: str, worker_id: str) -> None:
        workers = await self._bucket(WORKERS_BUCKET)
        await workers.put(liveness_key(model, worker_id), worker_id.encode())

    async def withdraw(self, model: str, worker_id: str) -> None:
        """This worker stops serving `model`: only its own liveness key goes."""
        workers = await self._bucket(WORKERS_BUCKET)
        await workers.delete(liveness_key(model, worker_id))

    async def report_load_failure(self, failure: ModelLoadFailure) -> None:
        failures = await self._bucket(LOAD_FAILURES_BUCKET)
        await failures.put(model_key(failure.name), failure.model_dump_json().encode())

    async def clear_load_failure(self, model: str) -> None:
        """A worker loaded `model`: an earlier failure to load it is no longer the news."""
        failures = await self._bucket(LOAD_FAILURES_BUCKET)
        with contextlib.suppress(KeyNotFoundError):
            await failures.get(model_key(model))
            await failures.delete(model_key(model))

    # -- the API's side ----------------------------------------------------------------

    async def card(self, model: str) -> ModelCard | None:
        cached = self._cards.get(model)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        models = await self._bucket(MODELS_BUCKET)
        try:
            entry = await models.get(model_key(model))
        except KeyNotFoundError:
            return None
        except Exception as error:
            raise JournalUnavailable(f"Could not read the model registry: {error}") from error
        card = ModelCard.model_validate_json(entry.value) if entry.value else None
        if card is not None:
            self._cards[model] = (time.monotonic() + CARD_CACHE_S, card)
        return card

    async def is_live(self, model: str) -> bool:
        """Whether some worker's heartbeat for `model` is current. A yes is remembered
        briefly (a hot path; see LIVE_CACHE_S); a no never is, so a worker coming back is
        seen at once."""
        key = model_key(model)
        if not self._watching:
            await self._watch_heartbeats()
        if time.monotonic() - self._live_seen.get(key, float("-inf")) < LIVE_CACHE_S:
            return True
        running = self._live_checks.get(key)
        if running is None:
            running = asyncio.ensure_future(self._read_liveness(key))
            self._live_checks[key] = running
            running.add_done_callback(lambda _: self._live_checks.pop(key, None))
        return await asyncio.shield(running)

    async def _read_liveness(self, key: str) -> bool:
        read_at = time.monotonic()
        live = bool(await self._live_keys(f"{key}.*", first=True))
        if live and read_at > self._withdrawn_at.get(key, float("-inf")):
            self._live_seen[key] = max(read_at, self._live_seen.get(key, read_at))
        return live

    async def _watch_heartbeats(self) -> None:
        """Follow the liveness keys' writes as they happen (a plain subscription, which
        the client renews after a reconnect): a heartbeat renews its model's yes, a
        withdrawal (a delete) forgets it."""
        nc = self._connection.require_client()

        async def on_write(msg: Msg) -> None:
            key = msg.subject[len(prefix) :].split(".", 1)[0]
            if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
                self._live_seen.pop(key, None)
                self._withdrawn_at[key] = time.monotonic()
            else:
                self._live_seen[key] = time.monotonic()

        prefix = f"$KV.{WORKERS_BUCKET}."
        self._watching = True
        try:
            await nc.subscribe(prefix + ">", cb=on_write)
        except Exception as error:
            self._watching = False
            raise JournalUnavailable(f"Could not follow the workers' heartbeats: {error}") from error

    async def live_workers(self, model: str) -> set[str]:
        """The workers (as subject tokens) whose heartbeat for `model` is current."""
        prefix = f"{model_key(model)}."
        return {key[len(prefix):] for key in await self._live_keys(f"{prefix}*")}

    async def live_models(self) -> list[ModelCard]:
        keys = await self._live_keys(">")
        models = await self._bucket(MODELS_BUCKET)
        cards = []
        for key in sorted({key.split(".", 1)[0] for key in keys}):
            with contextlib.suppress(KeyNotFoundError):
                entry = await models.get(key)
                cards.append(ModelCard.model_validate_json(entry.value or b""))
        return cards

    async def load_failure(self, model: str) -> ModelLoadFailure | None:
        """The latest failure of a worker to load `model`, while it is recent."""
        failures = await self._bucket(LOAD_FAILURES_BUCKET)
        try:
            entry = await failures.get(model_key(model))
        except KeyNotFoundError:
            return None
        except Exception as error:
            raise JournalUnavailable(f"Could not read the model registry: {error}") from error
        return _failure_of(entry.value)

    async def load_failures(self) -> list[ModelLoadFailure]:
        """Every model's latest recent failure to load, by model name."""
        failures = await self._bucket(LOAD_FAILURES_BUCKET)
        found = []
        for key in await self._current_keys(LOAD_FAILURES_BUCKET, ">"):
            with contextlib.suppress(KeyNotFoundError):
                failure = _failure_of((await failures.get(key)).value)
                if failure is not None:
                    found.append(failure)
        return sorted(found, key=lambda failure: failure.name)

    async def model_names(self) -> list[str]:
        """Every advertised model (as its registry key), live or not."""
        return await self._current_keys(MODELS_BUCKET, ">")

    async def _live_keys(self, pattern: str, *, first: bool = False) -> list[str]:
        return await self._current_keys(WORKERS_BUCKET, pattern, first=first)

    async def _current_keys(self, bucket: str, pattern: str, *, first: bool = False) -> list[str]:
        """The keys under `pattern` whose latest entry is a value (not a delete or purge).

        The stream's per-subject counts say which keys have entries at all; each is then read.
        A key-value watch is not used: its end-of-initial-values marker can arrive before
        values the server has already sent, and a listing would then come back short.
        """
        kv = await self._bucket(bucket)
        js = self._connection.require()
        prefix = f"$KV.{bucket}."
        try:
            info = await js.stream_info(f"KV_{bucket}", subjects_filter=prefix + pattern)
        except Exception as error:
            raise JournalUnavailable(f"Could not read the registry bucket {bucket}: {error}") from error
        keys = []
        for subject in sorted(info.state.subjects or {}):
            key = subject[len(prefix) :]
            try:
                await kv.get(key)
            except KeyNotFoundError:  # deleted, purged or expired
                continue
            except Exception as error:
                raise JournalUnavailable(f"Could not read the registry bucket {bucket}: {error}") from error
            keys.append(key)
            if first:
                break
        return keys


def _failure_of(value: bytes | None) -> ModelLoadFailure | None:
    """A stored failure; None for an empty or unreadable value (a newer worker's, say)."""
    if not value:
        return None
    try:
        return ModelLoadFailure.model_validate_json(value)
    except ValueError:
        return None
