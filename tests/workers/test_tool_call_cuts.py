"""A call cut at any length is a started call or nothing, never text: the format's markup
must not reach the answer, however short max_output_tokens is."""

from __future__ import annotations

import pytest

from events import ChatMessage, RequestAccepted, TokensGenerated, ToolCallEnded, ToolCallStarted
from events import ToolDefinition as Tool
from tests.workers.test_tool_calls import merged
from workers.output.tool_call_events import ToolCallEvents
from workers.output.tool_calls import (
    ArgumentsDelta,
    CallEnded,
    CallStarted,
    MessageText,
    ToolCallParser,
)

ARGUMENTS = '{"city": "Paris", "note": "a } and a <tool_call>"}'
CALL = f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGUMENTS}}}\n</tool_call>'
NAME_KNOWN_AT = CALL.index('get_weather"') + len('get_weather"')
PREAMBLES = ["", "Let me check.\n", "a < b, so "]


def cut_at(preamble: str, length: int, by_characters: bool):
    parser = ToolCallParser()
    text = preamble + CALL[:length]
    chunks = list(text) if by_characters else [text]
    return merged([piece for chunk in chunks for piece in parser.feed(chunk)] + parser.finish())


@pytest.mark.parametrize("preamble", PREAMBLES)
@pytest.mark.parametrize("by_characters", [False, True])
def test_every_cut_is_a_call_or_nothing(preamble: str, by_characters: bool) -> None:
    for length in range(1, len(CALL) + 1):
        pieces = cut_at(preamble, length, by_characters)
        text = [piece.text for piece in pieces if isinstance(piece, MessageText)]
        assert text == ([preamble.strip()] if preamble else []), (length, pieces)
        calls = [piece for piece in pieces if not isinstance(piece, MessageText)]
        if length < NAME_KNOWN_AT:
            assert calls == [], (length, pieces)
            continue
        assert calls[0] == CallStarted(0, "get_weather"), (length, pieces)
        arguments = "".join(p.text for p in calls if isinstance(p, ArgumentsDelta))
        assert ARGUMENTS.startswith(arguments), (length, arguments)
        assert isinstance(calls[-1], CallEnded)
        if length == len(CALL):
            assert calls[-1].arguments == arguments == ARGUMENTS


@pytest.mark.parametrize("length", range(1, len(CALL) + 1))
def test_a_cut_call_logs_no_text_and_stays_open_until_its_close_tag(length: int) -> None:
    request = RequestAccepted(response_id="resp_ab", seq=0, model="m",
                              messages=(ChatMessage(role="user", content="hi"),),
                              tools=(Tool(name="get_weather"),), tool_choice="required")
    events = ToolCallEvents(request)
    specs = events.on_text(CALL[:length], None) + events.on_finish("length")
    assert not [f for kind, f in specs if kind is TokensGenerated and f["channel"] == "text"]
    assert any(kind is ToolCallStarted for kind, _ in specs) == (length >= NAME_KNOWN_AT)
    assert any(kind is ToolCallEnded for kind, _ in specs) == (length == len(CALL))


def test_the_start_of_an_open_tag_at_the_end_is_not_text() -> None:
    for length in range(1, len("<tool_call>")):
        assert cut_at("Sure. ", length, by_characters=False) == [MessageText("Sure.")]
