"""The fold: a response's event log in, OpenAI `response.*` SSE events and the Response out.

Live streams, non-streaming replies and stream resumption all run this one fold over the
same log, so they cannot disagree. Feed events in `seq` order; a repeated or older `seq`
is ignored, which makes replays idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from events.generation import (
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    TokensGenerated,
    Usage,
)
from events.ids import item_id
from events.request import RequestAccepted
from events.response_object import (
    logprob_objects,
    message_item,
    output_text_part,
    reasoning_item,
    response_object,
)

SSEEvent = dict[str, Any]
TERMINAL_SSE_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(slots=True)
class _OpenItem:
    kind: str  # "reasoning" or "message"
    output_index: int
    id: str
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class ResponseFold:
    """State of one response, advanced one event at a time by `apply`."""

    def __init__(self) -> None:
        self.request: RequestAccepted | None = None
        self.status: str | None = None
        self.output: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete_details: dict[str, Any] | None = None
        self.completed_at: float | None = None
        self.last_seq = -1
        self.sse_events: list[SSEEvent] = []
        self._open: _OpenItem | None = None
        self._next_output_index = 0
        # Kept only for enable_response_messages.
        self._input_message: dict[str, Any] | None = None
        self._output_token_ids: list[int] = []
        self._raw_output_text: str | None = None

    @property
    def done(self) -> bool:
        return self.status in ("completed", "incomplete", "failed", "cancelled")

    def apply(self, event: Any) -> list[SSEEvent]:
        """Advance by one event; returns the SSE events it produces (already numbered)."""
        if event.seq <= self.last_seq or self.done:
            return []
        if self.request is None and not isinstance(event, RequestAccepted):
            raise ValueError(f"a response log starts with request.accepted, not {event.type}")
        self.last_seq = event.seq
        start = len(self.sse_events)
        match event:
            case RequestAccepted():
                self.request = event
                self.status = "queued"
                self._emit("response.created", response=self.response())
            case GenerationStarted():
                if event.prompt_text is not None and self._input_message is None:
                    self._input_message = _raw_message(event.prompt_text, event.prompt_token_ids or ())
                self._start()
            case TokensGenerated():
                self._start()
                if self._accepted.enable_response_messages:
                    self._output_token_ids.extend(event.token_ids)
                self._on_tokens(event)
            case ReasoningEnded():
                if self._open is not None and self._open.kind == "reasoning":
                    self._close_item("completed")
            case GenerationFinished():
                self._start()
                self._raw_output_text = event.raw_output_text
                self._finish(event)
            case GenerationFailed():
                self._close_item("incomplete")
                self.status = "failed"
                self.error = {"code": event.code, "message": event.message}
                self._emit("error", code=event.code, message=event.message, param=event.param)
                self._emit("response.failed", response=self.response())
        return self.sse_events[start:]

    @property
    def _accepted(self) -> RequestAccepted:
        if self.request is None:
            raise ValueError("no request.accepted event folded yet")
        return self.request

    def response(self) -> dict[str, Any]:
        request = self._accepted
        output = list(self.output)
        if self._open is not None:
            output.append(self._item_snapshot(self._open, "in_progress"))
        response = response_object(
            request,
            status=self.status or "queued",
            output=output,
            usage=self.usage if self.done else None,
            error=self.error,
            incomplete_details=self.incomplete_details,
            completed_at=self.completed_at,
        )
        if request.enable_response_messages:
            response["input_messages"] = [self._input_message] if self._input_message else []
            response["output_messages"] = (
                [_raw_message(self._raw_output_text, self._output_token_ids)]
                if self._raw_output_text is not None else []
            )
        return response

    # -- transitions -------------------------------------------------------------------

    def _start(self) -> None:
        if self.status == "queued":
            self.status = "in_progress"
            self._emit("response.in_progress", response=self.response())

    def _on_tokens(self, event: TokensGenerated) -> None:
        kind = "reasoning" if event.channel == "reasoning" else "message"
        if not event.text and not event.logprobs:
            return
        if kind == "reasoning" and not self._accepted.include_reasoning:
            return  # left out of the output; usage still counts it
        item = self._open
        if item is None or item.kind != kind:
            self._close_item("completed")
            item = self._open_item(kind)
        item.text.append(event.text)
        location = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        if kind == "reasoning":
            self._emit("response.reasoning_text.delta", **location, delta=event.text)
        else:
            logprobs = logprob_objects(event.logprobs)
            item.logprobs.extend(logprobs)
            self._emit("response.output_text.delta", **location, delta=event.text, logprobs=logprobs)

    def _finish(self, event: GenerationFinished) -> None:
        item_status = "completed" if event.finish_reason == "stop" else "incomplete"
        self._close_item(item_status)
        self.usage = event.usage
        self.completed_at = event.created_at
        if event.finish_reason == "stop":
            self.status = "completed"
            self._emit("response.completed", response=self.response())
        elif event.finish_reason == "length":
            self.status = "incomplete"
            self.incomplete_details = {"reason": "max_output_tokens"}
            self._emit("response.incomplete", response=self.response())
        else:
            # The Responses stream has no "cancelled" event; an incomplete terminal event
            # whose Response says status "cancelled" is the closest honest signal.
            self.status = "cancelled"
            self._emit("response.incomplete", response=self.response())

    def _open_item(self, kind: str) -> _OpenItem:
        output_index = self._next_output_index
        self._next_output_index += 1
        response_id = self._accepted.response_id
        prefix = "rs" if kind == "reasoning" else "msg"
        item = _OpenItem(kind, output_index, item_id(response_id, prefix, output_index))
        self._open = item
        if kind == "reasoning":
            added, part = reasoning_item(item.id, None, "in_progress"), {"type": "reasoning_text", "text": ""}
        else:
            added, part = message_item(item.id, None, [], "in_progress"), output_text_part("", [])
        self._emit("response.output_item.added", output_index=output_index, item=added)
        self._emit(
            "response.content_part.added",
            item_id=item.id, output_index=output_index, content_index=0, part=part,
        )
        return item

    def _close_item(self, status: str) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        text = "".join(item.text)
        location = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        if item.kind == "reasoning":
            self._emit("response.reasoning_text.done", **location, text=text)
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
        else:
            self._emit("response.output_text.done", **location, text=text, logprobs=item.logprobs)
            part = output_text_part(text, item.logprobs)
        self._emit("response.content_part.done", **location, part=part)
        done = self._item_snapshot(item, status)
        self.output.append(done)
        self._emit("response.output_item.done", output_index=item.output_index, item=done)

    @staticmethod
    def _item_snapshot(item: _OpenItem, status: str) -> dict[str, Any]:
        text = "".join(item.text)
        if item.kind == "reasoning":
            return reasoning_item(item.id, text, status)
        return message_item(item.id, text, list(item.logprobs), status)

    def _emit(self, sse_type: str, **fields: Any) -> None:
        self.sse_events.append(
            {"type": sse_type, "sequence_number": len(self.sse_events), **fields}
        )


def _raw_message(text: str, token_ids: Any) -> dict[str, Any]:
    return {"type": "raw_message_tokens", "message": text, "tokens": list(token_ids)}


def fold(events: list[Any]) -> ResponseFold:
    """Fold a whole log; `.sse_events` and `.response()` give the two outputs."""
    state = ResponseFold()
    for event in events:
        state.apply(event)
    return state
