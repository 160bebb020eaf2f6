"""Parses a harmony completion as it streams (the text of every token, formatting tokens
included) into what a response's items are made of:

    <|channel|>analysis<|message|>...<|end|>                         reasoning text
    <|start|>assistant<|channel|>final<|message|>...                  message text
    <|start|>assistant<|channel|>commentary<|message|>...<|end|>      message text (a preamble)
    <|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{...}
                                                                      a call to f, its arguments

Headers are read as openai-harmony's StreamableParser reads them (the channel after
`<|channel|>`, then the recipient and content type from what is left); a message addressed
to anyone is a call, named as addressed less the `functions.` prefix. The completion starts
inside the assistant's header (the prompt ends with `<|start|>assistant`). `<|end|>`,
`<|call|>` and `<|return|>` end a message; the last two also end generation, so they arrive
as the end of the output (`finish`) rather than as text. Whatever pieces the text arrives in,
the pieces given out depend only on the text so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.model.harmony import CALL, CHANNEL, CONSTRAIN, END, MESSAGE, RETURN, START
from workers.output.tool_calls import ArgumentsDelta, CallEnded, CallStarted, MessageText

ROLES = ("system", "developer", "user", "assistant", "tool")
_ENDS = (END, CALL, RETURN)


@dataclass(frozen=True, slots=True)
class ReasoningText:
    text: str


HarmonyPiece = ReasoningText | MessageText | CallStarted | ArgumentsDelta | CallEnded


@dataclass(frozen=True, slots=True)
class Header:
    role: str
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None


class HeaderError(ValueError):
    """A header harmony cannot read (as the library refuses it)."""


def parse_header(text: str, role: str | None) -> Header:
    """A message header (the text between `<|start|>` and `<|message|>`)."""
    channel = None
    at = text.find(CHANNEL)
    if at >= 0:
        after = text[at + len(CHANNEL):]
        end = next((i for i, char in enumerate(after) if char.isspace() or char == "<"), len(after))
        if end == 0:
            raise HeaderError("channel marker present but no channel value found in header")
        channel = after[:end]
        text = text[:at] + after[end:]
    text = text.strip()
    if CONSTRAIN in text:
        text = text.replace(CONSTRAIN, f" {CONSTRAIN}").strip()
    parts = text.split()
    if role is None:
        if not parts:
            raise HeaderError("message header did not contain a role")
        role = parts[0]
        if role not in ROLES:
            # An unknown author addressing someone is a tool, named by that first word.
            if len(parts) == 1 and not role.startswith("to="):
                raise HeaderError(f"Unknown role: {role}")
            parts.pop(0)
            role = "tool"
    if parts and parts[0] == role:
        parts.pop(0)
    recipient = content_type = None
    if parts:
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif len(parts) == 0 and not last.startswith(CONSTRAIN):
            recipient = last
        else:
            content_type = last
            if parts:
                raw = parts.pop()
                recipient = raw.removeprefix("to=")
    if parts:
        raise HeaderError(f"unexpected tokens remaining in message header: {' '.join(parts)!r}")
    return Header(role, channel, recipient, content_type)


class HarmonyStreamParser:
    """Fed the completion's text as it streams; returns the pieces each bit settles."""

    def __init__(self) -> None:
        self._header: str | None = ""  # the header being read; None: inside a message
        self._first = True  # the first header's role is the prompt's `assistant`
        self._message: Header | None = None
        self._held = ""  # content that may be the start of the token ending the message
        self._between = ""  # text after a message that may be the start of `<|start|>`
        self._call_started = False
        self.num_calls = 0
        self.messages: list[tuple[Header, str]] = []
        self._content = ""

    def feed(self, text: str) -> list[HarmonyPiece]:
        pieces: list[HarmonyPiece] = []
        while text:
            text = self._feed_header(text) if self._message is None else self._feed_content(
                text, pieces)
        return pieces

    def finish(self) -> list[HarmonyPiece]:
        """The output ended (at `<|call|>`, `<|return|>` or a limit): the open message ends
        with what it has."""
        pieces: list[HarmonyPiece] = []
        if self._message is not None:
            self._emit(self._held, pieces)
            self._held = ""
            self._end_message(pieces)
        return pieces

    def _feed_header(self, text: str) -> str:
        if self._header is None:  # between messages: only `<|start|>` opens the next
            text = self._between + text
            at = text.find(START)
            if at < 0:
                self._between = text[len(text) - _prefix_length(text, (START,)):]
                return ""
            self._between = ""
            self._header, text = "", text[at + len(START):]
        self._header += text
        at = self._header.find(MESSAGE)
        if at < 0:
            return ""
        rest = self._header[at + len(MESSAGE):]
        try:
            self._message = parse_header(self._header[:at], "assistant" if self._first else None)
        except HeaderError:
            # A header the model garbled: what follows is still shown, as the answer.
            self._message = Header("assistant")
        self._first = False
        self._header = None
        self._content = ""
        self._call_started = False
        return rest

    def _feed_content(self, text: str, pieces: list[HarmonyPiece]) -> str:
        held = self._held + text
        ends = [(at, token) for token in _ENDS if (at := held.find(token)) >= 0]
        if ends:
            at, token = min(ends)
            self._held = ""
            self._emit(held[:at], pieces)
            self._end_message(pieces)
            return held[at + len(token):]
        keep = _prefix_length(held, _ENDS)
        self._held = held[len(held) - keep:]
        self._emit(held[:len(held) - keep], pieces)
        return ""

    def _emit(self, text: str, pieces: list[HarmonyPiece]) -> None:
        message = self._message
        if message is None:
            return
        if not self._call_started and message.recipient not in (None, "all"):
            self._call_started = True
            name = message.recipient.removeprefix("functions.")
            pieces.append(CallStarted(self.num_calls, name))
        self._content += text
        if not text:
            return
        if message.recipient not in (None, "all"):
            pieces.append(ArgumentsDelta(self.num_calls, text))
        elif message.channel == "analysis":
            pieces.append(ReasoningText(text))
        else:
            pieces.append(MessageText(text))

    def _end_message(self, pieces: list[HarmonyPiece]) -> None:
        message = self._message
        if message is None:
            return
        if message.recipient not in (None, "all"):
            self._emit("", pieces)  # a call cut before its arguments still starts
            pieces.append(CallEnded(self.num_calls, self._content))
            self.num_calls += 1
        self.messages.append((message, self._content))
        self._message = None
        self._header = None


def _prefix_length(text: str, tokens: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper beginning of one of `tokens`."""
    return max((length for token in tokens for length in range(len(token) - 1, 0, -1)
                if text.endswith(token[:length])), default=0)
