"""Splits a streaming answer into message text and function calls in the model family's
markup (workers/output/tool_call_formats.py), emitting each call's arguments as they arrive:

    I will look it up.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Whatever the text arrives in pieces of, the pieces produced so far depend only on the text
so far, so a parser fed a resumed response's earlier text in one piece stands where the
first one stood. Whitespace next to a call, and at the very end, is not message text.

The format's markup is never message text: a block is a call once its name is known, and
nothing otherwise (a block without a name, a call cut before its name ends, the start of an
open tag the output ended on). A client cannot run half a tag, and showing it as the answer
would pass the model's plumbing off as what it said.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from events import RequestAccepted, ToolDefinition
from workers.model.tool_call_markup import HERMES, MISTRAL
from workers.output.custom_tool_calls import CUSTOM_OPEN_TAG, CustomCallScanner
from workers.output.named_call_scanner import NamedCallScanner
from workers.output.tool_call_formats import FORMATS, ToolCallFormat

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


@dataclass(frozen=True, slots=True)
class MessageText:
    text: str


@dataclass(frozen=True, slots=True)
class CallStarted:
    index: int
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsDelta:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class CallEnded:
    index: int
    arguments: str


Piece = MessageText | CallStarted | ArgumentsDelta | CallEnded


def callable_tools(request: RequestAccepted) -> list[ToolDefinition]:
    """The functions the response may call: none with tool_choice "none", else the allowed."""
    if request.tool_choice == "none":
        return []
    allowed = request.allowed_tool_names
    return [tool for tool in request.tools if allowed is None or tool.name in allowed]


class ToolCallParser:
    """Fed the answer text as it streams; returns the pieces each bit of text settles."""

    def __init__(self, call_format: ToolCallFormat | None = None) -> None:
        self.format = call_format or FORMATS[HERMES]
        # Every opener of a block, custom tools' included, with whether it is kept.
        self._openers = {**dict(zip(self.format.openers, self.format.kept, strict=True)),
                         CUSTOM_OPEN_TAG: False}
        self._text = ""  # text not yet given out, outside a call
        self._call: _CallScanner | CustomCallScanner | NamedCallScanner | None = None
        self._after_call = False  # whitespace right after a call is skipped
        self.num_calls = 0

    def feed(self, text: str) -> list[Piece]:
        pieces: list[Piece] = []
        while text:
            if self._call is None:
                text = self._feed_text(text, pieces)
            else:
                text = self._feed_call(self._call, text, pieces)
        return pieces

    def finish(self) -> list[Piece]:
        """The output ended. An open call is cut: it starts if its name is known and ends
        with the argument text it has, else it is dropped. What waited to see whether a call
        would open is whitespace and the start of an open tag, so it is dropped too."""
        pieces: list[Piece] = []
        if self._call is not None:
            call, self._call = self._call, None
            call.cut = True
            self._report(call, pieces)
        self._text = ""
        return pieces

    def _feed_text(self, text: str, pieces: list[Piece]) -> str:
        if self._after_call:
            # Whitespace, and the family's separator between calls (Llama's "; "), are
            # markup between blocks.
            text = text.lstrip()
            separator = self.format.separator.strip()
            if separator and text.startswith(separator):
                text = text[len(separator):].lstrip()
            if not text:
                return ""
            self._after_call = False
        self._text += text
        start, tag = _first_open_tag(self._text, self._openers)
        if start >= 0:
            before, rest = self._text[:start].rstrip(), self._text[start + len(tag):]
            if before:
                pieces.append(MessageText(before))
            self._text = ""
            self._call = self._scanner(tag)
            return tag + rest if self._openers[tag] else rest
        # Hold what could still open a call, and the whitespace before it.
        undecided = _open_tag_prefix_length(self._text, self._openers)
        ready = len(self._text[: len(self._text) - undecided].rstrip())
        if ready:
            pieces.append(MessageText(self._text[:ready]))
            self._text = self._text[ready:]
        return ""

    def _scanner(self, tag: str) -> _CallScanner | CustomCallScanner | NamedCallScanner:
        if tag == CUSTOM_OPEN_TAG:
            return CustomCallScanner(self.num_calls)
        if self.format.name == MISTRAL:
            return NamedCallScanner(self.num_calls)
        return _CallScanner(self.num_calls, self.format.arguments_key, self.format.close_tag)

    def _feed_call(
        self, call: _CallScanner | CustomCallScanner | NamedCallScanner, text: str,
        pieces: list[Piece],
    ) -> str:
        rest = call.feed(text)
        self._report(call, pieces)
        if not call.closed:
            return ""
        # A block that closed without a name is no call, and its markup is no text: it is
        # dropped. (A grammar-held answer never writes one.)
        self._call = None
        self._after_call = True
        return rest

    def _report(
        self, call: _CallScanner | CustomCallScanner | NamedCallScanner, pieces: list[Piece]
    ) -> None:
        """A call starts once its name and the start of its arguments are known (or it
        closed or was cut without arguments); then its arguments go out as they come."""
        ended = call.closed or call.cut
        if not call.started and call.name is not None and (call.arguments_started or ended):
            call.started = True
            self.num_calls += 1
            pieces.append(CallStarted(call.index, call.name))
        if not call.started:
            return
        delta = call.take_arguments()
        if delta:
            pieces.append(ArgumentsDelta(call.index, delta))
        if ended:
            pieces.append(CallEnded(call.index, call.arguments()))


def _first_open_tag(text: str, openers: dict[str, bool]) -> tuple[int, str]:
    """Where the first call block opens in `text`, and with which tag; -1 for none."""
    found = [(start, tag) for tag in openers if (start := text.find(tag)) >= 0]
    return min(found) if found else (-1, OPEN_TAG)


def _open_tag_prefix_length(text: str, openers: dict[str, bool]) -> int:
    """Length of the longest end of `text` that is a proper beginning of an open tag."""
    return max(
        (length for tag in openers
         for length in range(min(len(text), len(tag) - 1), 0, -1) if text.endswith(tag[:length])),
        default=0,
    )


class _CallScanner:
    """Follows the JSON object of one call character by character: where the `name` and
    arguments values lie, and where the block ends: at its close tag, or (without one) where
    the object closes."""

    def __init__(self, index: int, arguments_key: str = "arguments", close_tag: str = CLOSE_TAG
                 ) -> None:
        self.index = index
        self._arguments_key = arguments_key
        self._close_tag = close_tag
        self._object_closed = False
        self.raw = ""
        self.name: str | None = None
        self.started = False
        self.closed = False
        # The output ended inside the block: the arguments are what was written, no more.
        self.cut = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._key_start: int | None = None
        self._last_key: str | None = None
        self._expect_key = False
        self._value_key: str | None = None
        self._value_start: int | None = None
        self._arguments_span: list[int] = []  # [start] or [start, end]
        self._given_out = 0

    @property
    def arguments_started(self) -> bool:
        return bool(self._arguments_span)

    def arguments(self) -> str:
        if not self._arguments_span:
            # A call closed without arguments takes none; a cut one has none yet.
            return "{}" if self.closed else ""
        start, *end = self._arguments_span
        return self.raw[start:end[0]] if end else self.raw[start:].rstrip()

    def take_arguments(self) -> str:
        """The arguments text not given out yet. A value still open gives out all it has:
        inside an object or a string every character belongs to it."""
        if not self._arguments_span:
            delta = self.arguments()[self._given_out :]
            self._given_out += len(delta)
            return delta
        start, *end = self._arguments_span
        stop = end[0] if end else len(self.raw)
        if not end and self._depth == 1 and not self._in_string:
            # A bare number or literal: whitespace after it is not part of it.
            stop = start + len(self.raw[start:stop].rstrip())
        delta = self.raw[start + self._given_out : stop]
        self._given_out += len(delta)
        return delta

    def feed(self, text: str) -> str:
        """Consumes text up to and including the close tag; returns what follows it (and
        sets `closed`), or "" while the block is still open."""
        for offset, char in enumerate(text):
            self.raw += char
            self._step(char, len(self.raw) - 1)
            if self._in_string or self._depth != 0:
                continue
            if self._close_tag and self.raw.endswith(self._close_tag):
                self.raw = self.raw[: -len(self._close_tag)]
            elif self._close_tag or not self._object_closed:
                continue
            self._end_value(len(self.raw))
            self.closed = True
            return text[offset + 1 :]
        return ""

    def _step(self, char: str, position: int) -> None:
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
                if self._key_start is not None:
                    self._last_key = _json_string(self.raw[self._key_start : position + 1])
                    self._key_start = None
                elif self._depth == 1 and self._value_key == "name":
                    self.name = _json_string(self.raw[self._value_start : position + 1])
            return
        if char.isspace():
            return
        if self._depth == 1 and self._value_key is not None and self._value_start is None:
            self._value_start = position
            if self._value_key == self._arguments_key:
                self._arguments_span = [position]
        if char == '"':
            self._in_string = True
            if self._depth == 1 and self._expect_key:
                self._key_start = position
                self._expect_key = False
        elif char in "{[":
            self._depth += 1
            if self._depth == 1:
                self._expect_key = char == "{"
        elif char in "}]":
            if self._depth == 2:
                self._depth = 1
                self._end_value(position + 1)
                return
            if self._depth == 1:
                self._end_value(position)
                self._object_closed = True
            self._depth = max(self._depth - 1, 0)
        elif self._depth == 1 and char == ":":
            self._value_key, self._value_start = self._last_key, None
        elif self._depth == 1 and char == ",":
            self._end_value(position)
            self._expect_key = True

    def _end_value(self, end: int) -> None:
        """The value of the current top-level key ends at `end` (exclusive)."""
        if self._value_key == self._arguments_key and len(self._arguments_span) == 1:
            start = self._arguments_span[0]
            self._arguments_span.append(start + len(self.raw[start:end].rstrip()))
        self._value_key = None
        self._value_start = None


def _json_string(literal: str) -> str | None:
    try:
        value = json.loads(literal)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None
