"""The routes that look a stored response up: retrieve (and resume its stream), delete,
cancel and list its input items.

They need the response store (`SPATE_STORE_URL`), which this build does not have yet: until
it does, every id is unknown, and the 404 says why, in OpenAI's shape.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from api.deps import require_api_key
from api.errors import APIError, response_not_found
from api.fields import STORE_ENV

router = APIRouter(dependencies=[Depends(require_api_key)])

STORE_OFF = f"The response store is off, so no response is kept; set {STORE_ENV} to enable it."


def _not_stored(response_id: str) -> APIError:
    return response_not_found(response_id, why=STORE_OFF)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str) -> None:
    raise _not_stored(response_id)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str) -> None:
    raise _not_stored(response_id)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str) -> None:
    raise _not_stored(response_id)


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str) -> None:
    raise _not_stored(response_id)
