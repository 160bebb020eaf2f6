"""GET /health (the process is up) and GET /ready (NATS connected, a live worker; each
model's kernel backend, and models a worker could not load, with the reason)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import JournalDep
from api.errors import bus_unavailable
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
        failures = await journal.registry.load_failures()
    except JournalUnavailable as error:
        return JSONResponse({"status": "unavailable", "reason": bus_unavailable(error)}, 503)
    served = {card.name for card in models}
    # A model some worker serves is served, whatever another worker failed at.
    load_failures = {failure.name: failure.reason for failure in failures
                     if failure.name not in served}
    if not models:
        reason = "no live worker" + "".join(
            f"; the model '{name}' could not be loaded: {why}" for name, why in load_failures.items()
        )
        return JSONResponse(
            {"status": "unavailable", "reason": reason, "load_failures": load_failures}, 503
        )
    return {
        "status": "ready",
        "models": sorted(served),
        # What each model runs on (as its latest worker said): a fallback to the slower
        # torch ops shows here with its reason.
        "kernels": {card.name: card.kernels.model_dump() for card in models if card.kernels},
        "load_failures": load_failures,
    }
