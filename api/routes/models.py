"""GET /v1/models: the models some live worker serves (`data`, the OpenAI list), and
beside them the models a worker could not load, with the reason (`load_failures`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from api.deps import JournalDep, require_api_key

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.get("/v1/models")
async def list_models(journal: JournalDep) -> dict[str, Any]:
    cards = await journal.registry.live_models()
    served = {card.name for card in cards}
    failures = [failure for failure in await journal.registry.load_failures()
                if failure.name not in served]
    return {
        "object": "list",
        "data": [
            {
                "id": card.name,
                "object": "model",
                "created": int(card.created_at),
                "owned_by": "spate",
                "context_length": card.context_length,
                "reasoning": card.supports_reasoning,
            }
            for card in sorted(cards, key=lambda card: card.name)
        ],
        # Not served, and why: `data` lists only what a request can be sent to.
        "load_failures": [
            {
                "id": failure.name,
                "failed_at": int(failure.failed_at),
                "error": {"code": "model_load_failed", "message": failure.reason},
            }
            for failure in failures
        ],
    }
