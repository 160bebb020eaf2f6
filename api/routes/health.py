"""GET /health (the process is up) and GET /ready (NATS connected, a live worker)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import BusDep
from api.errors import BusUnavailable

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(bus: BusDep) -> Any:
    if not bus.connected:
        return JSONResponse({"status": "unavailable", "reason": "NATS is not connected"}, 503)
    try:
        models = await bus.live_models()
    except BusUnavailable as error:
        return JSONResponse({"status": "unavailable", "reason": str(error)}, 503)
    if not models:
        return JSONResponse({"status": "unavailable", "reason": "no live worker"}, 503)
    return {"status": "ready", "models": sorted(card.name for card in models)}
