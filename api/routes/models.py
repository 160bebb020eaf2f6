"""GET /v1/models: the models some live worker serves."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from api.deps import JournalDep, require_api_key

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.get("/v1/models")
async def list_models(journal: JournalDep) -> dict[str, Any]:
    cards = await journal.registry.live_models()
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
    }
