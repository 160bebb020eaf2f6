"""GET /health (the process is up) and GET /ready (NATS connected, a live worker)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.dependency_errors import bus_unavailable
from api.deps import JournalDep
from journal import JournalUnavailable

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(journal: JournalDep) -> Any:
    if not journal.connected:
        return JSONResponse({"status": "unavailable", "reason": "NATS is not connected"}, 503)
    try:
        models = await journal.registry.live_models()
    except JournalUnavailable as error:
        return JSONResponse({"status": "unavailable", "reason": bus_unavailable(error)}, 503)
    if not models:
        return JSONResponse({"status": "unavailable", "reason": "no live worker"}, 503)
    return {"status": "ready", "models": sorted(card.name for card in models)}
