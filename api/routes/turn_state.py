"""The `x-codex-turn-state` header on the routes (api/lowering/turn_state.py): a create
that presents a turn's token is sent where that turn runs, and every create's reply (and
every WebSocket handshake) carries a token for the turn it belongs to."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from api.lowering.turn_state import HEADER, TurnState, issue, read
from api.state import ApiState


def presented_turn(connection: HTTPConnection, state: ApiState, owner: str) -> TurnState | None:
    """The turn the request's header names, if it names one `owner` may use."""
    return read(state.content_keys, owner, connection.headers.get(HEADER))


def follow_turn(state: ApiState, response_id: str, turn: TurnState | None) -> None:
    """Route the create `response_id` (not yet published) by `turn`, when there is one."""
    if turn is not None and state.cache_router is not None:
        state.cache_router.follow_turn(response_id, turn.turn, turn.worker)


def turn_state_header(
    connection: HTTPConnection, state: ApiState, owner: str, response_id: str | None,
    turn: TurnState | None,
) -> dict[str, str]:
    """The header for a reply: the token the client presented, as it was, or one for a
    new turn naming the worker chosen for `response_id` (published by now) if any."""
    if turn is not None:
        return {HEADER: connection.headers[HEADER]}
    router = state.cache_router
    worker = router.chosen_for(response_id) if router is not None and response_id else None
    return {HEADER: issue(state.content_keys, owner, TurnState.new(worker))}
