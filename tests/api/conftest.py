"""The API in-process, with NATS unreachable: what it answers before any NATS call
(validation, the store switch) is answered for real, the rest is the 503 of a missing bus."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from api.app import create_app
from api.settings import ApiSettings
from cli.nats_server import free_port


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(ApiSettings(nats_url=f"nats://127.0.0.1:{free_port()}"))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=transport, base_url="http://spate"
    ) as connected:
        yield connected
