"""The model registry and worker liveness, in two JetStream key-value buckets.

MODELS holds one card per served model (name, context length, reasoning markers). WORKERS
holds one key per (model, worker), `<model>.<worker>`, with the bucket's TTL: each worker
renews its own key, so one worker stopping never makes a model look gone while another
still serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from nats.js.errors import KeyNotFoundError

from events import ModelCard
from events.subjects import MODELS_BUCKET, WORKERS_BUCKET, model_key, subject_token
from journal.connection import Connection
from journal.errors import JournalUnavailable

# Registry answers reused on the request path; a card changes only when a worker with a
# different build of the model starts.
CARD_CACHE_S = 5.0
LIVE_CACHE_S = 0.5


def liveness_key(model: str, worker_id: str) -> str:
    return f"{model_key(model)}.{subject_token(worker_id)}"


class Registry:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._cards: dict[str, tuple[float, ModelCard]] = {}
        self._live_until: dict[str, float] = {}
        # One liveness read per model at a time: a burst of requests shares it.
        self._live_checks: dict[str, asyncio.Future[bool]] = {}

    async def _bucket(self, name: str) -> Any:
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
        briefly (a hot path); a no never is, so a worker coming back is seen at once."""
        if self._live_until.get(model, 0.0) > time.monotonic():
            return True
        running = self._live_checks.get(model)
        if running is None:
            running = asyncio.ensure_future(self._read_liveness(model))
            self._live_checks[model] = running
            running.add_done_callback(lambda _: self._live_checks.pop(model, None))
        return await asyncio.shield(running)

    async def _read_liveness(self, model: str) -> bool:
        live = bool(await self._live_keys(f"{model_key(model)}.*", first=True))
        if live:
            self._live_until[model] = time.monotonic() + LIVE_CACHE_S
        return live

    async def live_models(self) -> list[ModelCard]:
        keys = await self._live_keys(">")
        models = await self._bucket(MODELS_BUCKET)
        cards = []
        for key in sorted({key.split(".", 1)[0] for key in keys}):
            with contextlib.suppress(KeyNotFoundError):
                entry = await models.get(key)
                cards.append(ModelCard.model_validate_json(entry.value))
        return cards

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
