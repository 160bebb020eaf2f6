"""A custom tool's call in the answer: its input is plain text, not JSON, so it has a
block of its own beside the hermes `<tool_call>` one:

    <custom_tool_call name="apply_patch">
    *** Begin Patch
    ...
    </custom_tool_call>

The name is written in the open tag; the input is every character up to the newline
before the close tag (a grammar-held input cannot write the close tag early: the grammar
ends where it does)."""

from __future__ import annotations

CUSTOM_OPEN_TAG = '<custom_tool_call name="'
CUSTOM_HEADER_END = '">\n'
CUSTOM_CLOSE_TAG = "\n</custom_tool_call>"


def custom_block(name: str, text: str) -> str:
    """How a call to custom tool `name` with input `text` is written."""
    return f"{CUSTOM_OPEN_TAG}{name}{CUSTOM_HEADER_END}{text}{CUSTOM_CLOSE_TAG}"


class CustomCallScanner:
    """Follows one custom block after its open tag; the same surface as the hermes
    scanner (workers/tool_calls.py), so the parser reports both alike."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name: str | None = None
        self.started = False
        self.closed = False
        self.cut = False
        self._header = ""
        self._input = ""
        self._given_out = 0

    @property
    def arguments_started(self) -> bool:
        return self.name is not None

    def arguments(self) -> str:
        """The input; a cut block's ends before what may have begun its close tag, which
        is markup, not input."""
        return self._input if self.closed else self._input[:_settled(self._input)]

    def take_arguments(self) -> str:
        """The input not given out yet, holding back what may begin the close tag."""
        delta = self.arguments()[self._given_out:]
        self._given_out += len(delta)
        return delta

    def feed(self, text: str) -> str:
        """Consumes text up to and including the close tag; returns what follows it."""
        if self.name is None:
            self._header += text
            end = self._header.find(CUSTOM_HEADER_END)
            if end < 0:
                return ""
            self.name, text = self._header[:end], self._header[end + len(CUSTOM_HEADER_END):]
        self._input += text
        end = self._input.find(CUSTOM_CLOSE_TAG)
        if end < 0:
            return ""
        self._input, rest = self._input[:end], self._input[end + len(CUSTOM_CLOSE_TAG):]
        self.closed = True
        return rest


def _settled(text: str) -> int:
    """Length of `text` less its longest end that is a proper beginning of the close tag."""
    for length in range(min(len(text), len(CUSTOM_CLOSE_TAG) - 1), 0, -1):
        if text.endswith(CUSTOM_CLOSE_TAG[:length]):
            return len(text) - length
    return len(text)
