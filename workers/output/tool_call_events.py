"""One response's answer as log events when it may call functions: message text as
tokens.generated on channel "text", each call as tool_call.started, its arguments as
tokens.generated on channel "tool_call", and tool_call.ended."""

from __future__ import annotations

from typing import Any

from events import RequestAccepted, TokenLogprob, TokensGenerated, ToolCallEnded, ToolCallStarted
from events.ids import call_id
from workers.output.tool_call_formats import tool_call_format
from workers.output.tool_calls import (
    ArgumentsDelta,
    CallEnded,
    CallStarted,
    MessageText,
    Piece,
    ToolCallParser,
)

# (event type, its fields): what the worker publishes, in order.
EventSpec = tuple[type, dict[str, Any]]


class ToolCallEvents:
    def __init__(self, request: RequestAccepted, format_name: str | None = None) -> None:
        self.response_id = request.response_id
        # The model family's call markup (hermes where spate writes the tools out).
        self._parser = ToolCallParser(tool_call_format(format_name))
        # The name the model writes -> (namespace, the tool's own name, its kind).
        self._names = {
            tool.name: (tool.namespace, tool.name.removeprefix(f"{tool.namespace}.")
                        if tool.namespace else tool.name, tool.kind)
            for tool in request.tools
        }
        # Logprobs of answer tokens whose text the parser still holds; they go out with the
        # next message text. Tokens of a call report none, as OpenAI's function calls do.
        self._logprobs: list[TokenLogprob] = []

    def catch_up(self, text: str) -> None:
        """A resumed response: the parser reads the answer text streamed before, silently."""
        self._parser.feed(text)

    def on_text(self, text: str, logprobs: tuple[TokenLogprob, ...] | None) -> list[EventSpec]:
        if logprobs:
            self._logprobs.extend(logprobs)
        return self._events(self._parser.feed(text))

    def on_finish(self, finish_reason: str | None) -> list[EventSpec]:
        pieces = self._parser.finish()
        if finish_reason != "stop":
            # A call cut short stays open: generation.finished closes it as incomplete.
            pieces = [piece for piece in pieces if not isinstance(piece, CallEnded)]
        return self._events(pieces)

    def _events(self, pieces: list[Piece]) -> list[EventSpec]:
        events: list[EventSpec] = []
        for piece in pieces:
            if isinstance(piece, MessageText):
                logprobs, self._logprobs = tuple(self._logprobs) or None, []
                events.append((TokensGenerated, {"channel": "text", "text": piece.text,
                                                 "logprobs": logprobs}))
            elif isinstance(piece, CallStarted):
                self._logprobs = []
                namespace, name, kind = self._names.get(piece.name, (None, piece.name, "function"))
                events.append((ToolCallStarted, {"call_id": self._call_id(piece.index),
                                                 "name": name, "namespace": namespace,
                                                 "kind": kind}))
            elif isinstance(piece, ArgumentsDelta):
                events.append((TokensGenerated, {"channel": "tool_call", "text": piece.text}))
            elif isinstance(piece, CallEnded):
                events.append((ToolCallEnded, {"call_id": self._call_id(piece.index),
                                               "arguments": piece.arguments}))
        return events

    def _call_id(self, index: int) -> str:
        return call_id(self.response_id, index)
