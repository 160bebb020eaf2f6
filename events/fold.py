"""The fold: a response's event log in, OpenAI `response.*` SSE events and the Response out.

Live streams, non-streaming replies and stream resumption all run this one fold over the
same log, so they cannot disagree. Feed events in `seq` order; a repeated or older `seq`
is ignored, which makes replays idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from events.builtin_tools import builtin_item
from events.generation import (
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    TokensGenerated,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
)
from events.ids import item_id
from events.request import RequestAccepted
from events.response_object import (
    custom_tool_call_item,
    function_call_item,
    length_incomplete_details,
    logprob_objects,
    message_item,
    output_text_part,
    reasoning_item,
    response_object,
)

SSEEvent = dict[str, Any]
TERMINAL_SSE_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})
# The statuses a Response ends in: nothing changes it after one.
TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
# Every event a response's log may hold, each with its case in ResponseFold.apply.
# (cancel.requested travels on the cancel subject, never in the log.)
LOG_EVENT_TYPES = (
    RequestAccepted, GenerationStarted, TokensGenerated, ReasoningEnded, ToolCallStarted,
    ToolCallEnded, GenerationFinished, GenerationFailed,
)


class UnknownEventType(TypeError):
    """An event the fold has no case for: a bug to fix, never something to skip."""


@dataclass(slots=True)
class _OpenItem:
    kind: str  # "reasoning", "message", or "call" (call.kind says which tool)
    output_index: int
    id: str
    # The text, or a function call's arguments, in deltas.
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call: ToolCallStarted | None = None


_ITEM_ID_PREFIX = {"reasoning": "rs", "message": "msg", "function": "fc", "custom": "ctc",
                   "local_shell": "lsc", "shell": "sc", "apply_patch": "apc"}


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
        return self.status in TERMINAL_STATUSES

    def apply(self, event: Any) -> list[SSEEvent]:
        """Advance by one event; returns the SSE events it produces (already numbered).

        Raises UnknownEventType for anything that is not a response log event: dropping
        it would let a new event type vanish from every stream without a trace.
        """
        if not isinstance(event, LOG_EVENT_TYPES):
            raise UnknownEventType(
                f"the fold has no case for {getattr(event, 'type', type(event).__name__)!r}; "
                "a response log holds only "
                + ", ".join(kind.model_fields["type"].default for kind in LOG_EVENT_TYPES)
            )
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
            case ToolCallStarted():
                self._start()
                self._close_item("completed")
                self._open_item("call", event)
            case ToolCallEnded():
                if self._open is not None and self._open.kind == "call":
                    self._close_item("completed")
            case GenerationFinished():
                self._start()
                self._raw_output_text = event.raw_output_text
                self._finish(event)
            case GenerationFailed():
                self._close_item("incomplete")
                self.status = "failed"
                self.error = {"code": event.code, "message": event.message}
                self._emit("error", **error_fields(event.code, event.message, event.param))
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
            if self._accepted.compaction is not None:
                self._compaction_item(self._accepted.compaction)

    def _compaction_item(self, item: dict[str, Any]) -> None:
        """The compaction item the API made before publishing: output item 0."""
        index = self._next_output_index
        self._next_output_index += 1
        self._emit("response.output_item.added", output_index=index, item=item)
        self.output.append(item)
        self._emit("response.output_item.done", output_index=index, item=item)

    def _on_tokens(self, event: TokensGenerated) -> None:
        if event.channel == "tool_call":
            self._on_arguments(event.text)
            return
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

    def _on_arguments(self, delta: str) -> None:
        item = self._open
        if not delta or item is None or item.call is None:
            return
        item.text.append(delta)
        location = {"item_id": item.id, "output_index": item.output_index}
        if item.call.kind == "function":
            self._emit("response.function_call_arguments.delta", **location, delta=delta)
        elif item.call.kind == "custom":
            self._emit("response.custom_tool_call_input.delta", **location, delta=delta)
        # A built-in's item comes whole when its call closes: its action is parsed JSON.

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
            self.incomplete_details = length_incomplete_details(
                self._accepted.sampling.max_output_tokens, event.usage
            )
            self._emit("response.incomplete", response=self.response())
        else:
            # The Responses stream has no "cancelled" event; an incomplete terminal event
            # whose Response says status "cancelled" is the closest honest signal.
            self.status = "cancelled"
            self._emit("response.incomplete", response=self.response())

    def _open_item(self, kind: str, call: ToolCallStarted | None = None) -> _OpenItem:
        output_index = self._next_output_index
        self._next_output_index += 1
        response_id = self._accepted.response_id
        prefix = _ITEM_ID_PREFIX[call.kind if call is not None else kind]
        item = _OpenItem(kind, output_index, item_id(response_id, prefix, output_index), call=call)
        self._open = item
        if call is not None:
            # A call has no content parts: a function's arguments and a custom tool's input
            # stream on the item itself; a built-in's item is added once its action is whole.
            if call.kind in ("function", "custom"):
                added = self._item_snapshot(item, "in_progress")
                self._emit("response.output_item.added", output_index=output_index, item=added)
            return item
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
        if item.call is not None:
            location = {"item_id": item.id, "output_index": item.output_index}
            if item.call.kind == "function":
                self._emit("response.function_call_arguments.done", **location, arguments=text)
            elif item.call.kind == "custom":
                self._emit("response.custom_tool_call_input.done", **location, input=text)
            else:
                added = self._item_snapshot(item, "in_progress")
                self._emit("response.output_item.added", output_index=item.output_index, item=added)
            self._done_item(item, status)
            return
        location = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        if item.kind == "reasoning":
            self._emit("response.reasoning_text.done", **location, text=text)
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
        else:
            self._emit("response.output_text.done", **location, text=text, logprobs=item.logprobs)
            part = output_text_part(text, item.logprobs)
        self._emit("response.content_part.done", **location, part=part)
        self._done_item(item, status)

    def _done_item(self, item: _OpenItem, status: str) -> None:
        done = self._item_snapshot(item, status)
        self.output.append(done)
        self._emit("response.output_item.done", output_index=item.output_index, item=done)

    @staticmethod
    def _item_snapshot(item: _OpenItem, status: str) -> dict[str, Any]:
        text = "".join(item.text)
        if item.call is not None:
            call = item.call
            if call.kind == "function":
                return function_call_item(item.id, call.call_id, call.name, call.namespace, text,
                                          status)
            if call.kind == "custom":
                return custom_tool_call_item(item.id, call.call_id, call.name, call.namespace, text)
            return builtin_item(call.kind, item.id, call.call_id, text, status)
        if item.kind == "reasoning":
            return reasoning_item(item.id, text, status)
        return message_item(item.id, text, list(item.logprobs), status)

    def _emit(self, sse_type: str, **fields: Any) -> None:
        self.sse_events.append(
            {"type": sse_type, "sequence_number": len(self.sse_events), **fields}
        )


def error_fields(code: str, message: str, param: str | None) -> dict[str, Any]:
    """An `error` event's fields: the official SDK reads `code`, `message` and `param` at
    the top, the Open Responses specification reads them in an `error` object; both are
    there. A failure that names a request field is the request's fault."""
    kind = "invalid_request_error" if param is not None else "server_error"
    return {"code": code, "message": message, "param": param,
            "error": {"type": kind, "code": code, "message": message, "param": param}}


def _raw_message(text: str, token_ids: Any) -> dict[str, Any]:
    return {"type": "raw_message_tokens", "message": text, "tokens": list(token_ids)}


def fold(events: list[Any]) -> ResponseFold:
    """Fold a whole log; `.sse_events` and `.response()` give the two outputs."""
    state = ResponseFold()
    for event in events:
        state.apply(event)
    return state
