"""WebSocket mode on /v1/responses: the upgrade, authenticated like a POST (the same API
keys, the same owner), then a SocketSession for the life of the connection."""

from __future__ import annotations

import logging

from fastapi import APIRouter, WebSocket

from api.deps import check_api_key, owner_of
from api.errors import APIError
from api.routes.turn_state import presented_turn, turn_state_header
from api.state import api_state
from api.websocket.session import SocketSession

router = APIRouter()
log = logging.getLogger("spate.api.socket")

# Closing an upgrade that a server cannot answer with an HTTP status (RFC 6455).
CLOSE_POLICY_VIOLATION = 1008


@router.websocket("/v1/responses")
async def responses_socket(socket: WebSocket) -> None:
    try:
        check_api_key(socket)
        drain = api_state(socket).drain
        if drain.draining:
            raise drain.refusal()
    except APIError as error:
        await refuse(socket, error)
        return
    owner = owner_of(socket)
    state = api_state(socket)
    # Codex reads x-codex-turn-state off the handshake and presents it when it connects
    # again within the turn: that connection's creates go where the turn runs.
    turn = presented_turn(socket, state, owner)
    header = turn_state_header(socket, state, owner, None, turn)
    await socket.accept(headers=[(name.encode(), value.encode()) for name, value in header.items()])
    await SocketSession(socket, owner, turn).run()


async def refuse(socket: WebSocket, error: APIError) -> None:
    """Answer the upgrade with the status and error body a POST would get, where the
    server can send one; otherwise close it before accepting."""
    if "websocket.http.response" in socket.scope.get("extensions", {}):
        await socket.send_denial_response(error.response())
    else:
        await socket.close(CLOSE_POLICY_VIOLATION, error.message[:120])
