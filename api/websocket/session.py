"""One connection in WebSocket mode: its lanes (each a FIFO of creates, lanes side by
side), their bounds, the chains it holds for `previous_response_id`, and what a dropped
socket cancels. Every generated response is the same request event and log as over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from api.errors import DEPENDENCY_ERRORS, APIError, dependency_error
from api.lowering.encrypted_content import sealer_for
from api.lowering.history import Context, conversation_id_of
from api.lowering.request_event import built_request
from api.lowering.stored_items import input_item_dicts
from api.lowering.turn_state import TurnState
from api.schema.body import validated
from api.schema.request import ResponsesRequest
from api.state import api_state
from api.websocket.chains import HeldChains, unanswered_output
from api.websocket.protocol import ClientCreate, SocketError, error_event, parse_create
from api.websocket.response import streamed, warmed

log = logging.getLogger("spate.api.socket")

# What a socket closes with when the server gives up on it (RFC 6455).
CLOSE_TRY_AGAIN = 1013


@dataclass(slots=True)
class Lane:
    """The creates waiting on one `stream_id` behind the one it is answering."""

    waiting: deque[ClientCreate] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class SocketSession:
    def __init__(self, socket: WebSocket, owner: str, turn: TurnState | None = None) -> None:
        self.state = api_state(socket)
        self.socket = socket
        self.owner = owner
        # The turn the handshake's x-codex-turn-state named: each create follows it.
        self.turn = turn
        self.settings = self.state.settings
        self.store = self.state.store
        self.chains = HeldChains(self.settings.ws_held_bytes)
        self.lanes: dict[str | None, Lane] = {}
        self.queued = 0
        self._send_lock = asyncio.Lock()
        self._closing = False

    async def run(self) -> None:
        """Take client events until the socket closes; then cancel what it was
        generating (a stored response goes on, to be read back)."""
        try:
            while not self._closing:
                message = await self.socket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("text")
                await self._take(data if data is not None else message.get("bytes") or b"")
        except (WebSocketDisconnect, RuntimeError):
            return  # the client went while a message was read or answered
        finally:
            self._closing = True
            tasks = [lane.task for lane in self.lanes.values() if lane.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def send(self, event: dict[str, Any]) -> None:
        """One server event as one text message; a client that takes none for the send
        timeout is cut (its lanes' generations cancelled, as for a dropped socket)."""
        text = json.dumps(event, separators=(",", ":"))
        async with self._send_lock:
            try:
                await asyncio.wait_for(self.socket.send_text(text), self.settings.sse_send_timeout_s)
            except asyncio.TimeoutError:
                log.warning("cut a WebSocket: its client took no event for %g s",
                            self.settings.sse_send_timeout_s)
                self._closing = True
                with contextlib.suppress(Exception):
                    await self.socket.close(CLOSE_TRY_AGAIN)
                raise

    async def _take(self, message: str | bytes) -> None:
        """Queue one client event on its lane, or answer it with an error event."""
        try:
            create = parse_create(message, self.settings.max_body_bytes)
            if self.state.drain.draining:
                raise SocketError(self.state.drain.refusal(), create.stream_id)
            self._enqueue(create)
        except SocketError as error:
            await self.send(error_event(error, error.stream_id))

    def _enqueue(self, create: ClientCreate) -> None:
        lane = self.lanes.get(create.stream_id)
        if lane is not None:
            if self.queued >= self.settings.ws_max_queued:
                raise SocketError(APIError(
                    429, f"Too many creates waiting on this connection (at most "
                    f"{self.settings.ws_max_queued}; SPATE_WS_MAX_QUEUED).",
                    code="rate_limit_exceeded"), create.stream_id)
            lane.waiting.append(create)
            self.queued += 1
            return
        if len(self.lanes) >= self.settings.ws_max_lanes:
            raise SocketError(APIError(
                429, f"Too many lanes generating at once on this connection (at most "
                f"{self.settings.ws_max_lanes}; SPATE_WS_MAX_LANES): wait for one to finish "
                "or send on a busy lane's stream_id.", param="stream_id",
                code="rate_limit_exceeded"), create.stream_id)
        lane = self.lanes[create.stream_id] = Lane()
        lane.task = asyncio.create_task(self._serve_lane(create, lane))

    async def _serve_lane(self, create: ClientCreate, lane: Lane) -> None:
        """Answer a lane's creates one after the other, then retire the lane."""
        try:
            while True:
                await self._answer(create)
                if not lane.waiting or self._closing:
                    return
                create = lane.waiting.popleft()
                self.queued -= 1
        except (WebSocketDisconnect, RuntimeError, asyncio.TimeoutError, OSError):
            self._closing = True  # the socket is gone: the others end with it
        finally:
            self.queued -= len(lane.waiting)
            if self.lanes.get(create.stream_id) is lane:
                del self.lanes[create.stream_id]

    async def _answer(self, create: ClientCreate) -> None:
        state = self.state
        try:
            request = validated(create.body, ResponsesRequest)
            built = await built_request(self.store, state.journal, self.settings, request,
                                        self.owner, state.content_keys, self._chain(request))
            seal = sealer_for(built.body, state.content_keys, self.owner)
            if self.turn is not None and state.cache_router is not None:
                state.cache_router.follow_turn(built.event.response_id, self.turn.turn,
                                               self.turn.worker)
            response = (await streamed(state, built, seal, create.stream_id, self.send)
                        if create.generate else await warmed(state, built, create.stream_id, self.send))
        except APIError as error:
            self._evict(create)
            await self.send(error_event(not_found_as_chain_miss(error), create.stream_id))
            return
        except DEPENDENCY_ERRORS as error:
            self._evict(create)
            await self.send(error_event(dependency_error(error), create.stream_id))
            return
        except (WebSocketDisconnect, RuntimeError, asyncio.TimeoutError, OSError):
            raise  # the socket is gone: _serve_lane ends the connection's lanes
        except Exception:
            # A bug answers this create as the HTTP route answers one: a 500, logged.
            log.exception("unhandled error answering a WebSocket create")
            self._evict(create)
            await self.send(error_event(APIError(500, "Internal server error."),
                                        create.stream_id))
            return
        if response is not None and response["status"] in ("completed", "incomplete"):
            own = input_item_dicts(built.body)
            self.chains.hold(response["id"], [*built.context.items, *own, *response["output"]])

    def _evict(self, create: ClientCreate) -> None:
        """A continuation that failed drops the response it named from the connection,
        as OpenAI's WebSocket mode does: the client starts that chain again with its
        full history (or from the store) rather than build on state it may have lost
        track of."""
        previous = create.body.get("previous_response_id")
        if isinstance(previous, str):
            self.chains.drop(previous)

    def _chain(self, request: ResponsesRequest) -> Context | None:
        """The turns before the create's `previous_response_id` when this connection
        holds them; None sends the lookup to the store, and with the store off a
        previous response it does not hold is not found."""
        previous = request.previous_response_id
        if previous is None:
            return None
        if conversation_id_of(request) is not None:
            raise APIError(400, "Use either 'previous_response_id' or 'conversation', not both.",
                           param="conversation", code="invalid_value")
        held = self.chains.history(previous)
        if held is not None:
            if not isinstance(request.input, str) and (
                    orphan := unanswered_output(held, request.input)) is not None:
                index, call_id = orphan
                raise APIError(
                    400, f"No tool call found for function call output with call_id "
                    f"'{call_id}': input[{index}] answers no call of the chain of previous "
                    f"response '{previous}'. That chain is dropped from this connection; "
                    "send the full history to go on.",
                    param=f"input[{index}].call_id", code="invalid_value")
            return Context(list(held))
        if self.store is None:
            raise previous_not_found(previous)
        return None


def not_found_as_chain_miss(error: APIError) -> APIError:
    """A previous response the store does not have either: the socket answers as OpenAI's
    does, so a client knows to start the chain again with its full history."""
    if error.status == 404 and error.param == "previous_response_id":
        return previous_not_found(error.message.split("'")[1])
    return error


def previous_not_found(response_id: str) -> APIError:
    return APIError(400, f"Previous response with id '{response_id}' not found.",
                    param="previous_response_id", code="previous_response_not_found")
