"""One Mistral call after its `[TOOL_CALLS]` opener: the function's name up to `[ARGS]`, then
its arguments, a JSON value that ends where it closes:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}

The same surface as the hermes scanner (workers/output/tool_calls.py), so the parser
reports every family's calls alike."""

from __future__ import annotations

ARGS_TAG = "[ARGS]"
# Mistral Small 3.2 may write the call's id after its name: `name[CALL_ID]id[ARGS]{...}`.
CALL_ID_TAG = "[CALL_ID]"


class NamedCallScanner:
    def __init__(self, index: int) -> None:
        self.index = index
        self.name: str | None = None
        self.started = False
        self.closed = False
        self.cut = False
        self._header = ""
        self._arguments = ""
        self._given_out = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False

    @property
    def arguments_started(self) -> bool:
        return bool(self._arguments.strip())

    def arguments(self) -> str:
        if not self._arguments.strip():
            # A call closed without arguments takes none; a cut one has none yet.
            return "{}" if self.closed else ""
        return self._arguments.strip()

    def take_arguments(self) -> str:
        """The arguments text not given out yet (what is written of the value so far)."""
        text = self._arguments.lstrip()
        if not self.closed and self._depth == 0:
            text = text.rstrip()  # a bare value: whitespace after it is not part of it
        delta = text[self._given_out:]
        self._given_out += len(delta)
        return delta

    def feed(self, text: str) -> str:
        """Consumes the call; returns what follows its arguments (and sets `closed`), or ""
        while it is still being written."""
        if self.name is None:
            self._header += text
            end = self._header.find(ARGS_TAG)
            if end < 0:
                return ""
            self.name = self._header[:end].split(CALL_ID_TAG)[0].strip()
            text = self._header[end + len(ARGS_TAG):]
        for offset, char in enumerate(text):
            self._arguments += char
            if self._step(char):
                self.closed = True
                return text[offset + 1:]
        return ""

    def _step(self, char: str) -> bool:
        """Follows the JSON value; True once it has closed."""
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
            return False
        if char == '"':
            self._in_string = True
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
            return self._depth <= 0
        return False
