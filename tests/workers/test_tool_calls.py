"""ToolCallParser: message text and hermes-format calls out of streamed answer text."""

from __future__ import annotations

import random

import pytest

from workers.output.tool_calls import (
    ArgumentsDelta,
    CallEnded,
    CallStarted,
    MessageText,
    Piece,
    ToolCallParser,
)

TWO_CALLS = (
    "I will check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, {"note": "}"}]}}\n'
    "</tool_call>\n<tool_call>\n"
    '{"name": "crm.find", "arguments": {}}\n</tool_call>\n'
)


def parse(chunks: list[str]) -> list[Piece]:
    parser = ToolCallParser()
    pieces = [piece for chunk in chunks for piece in parser.feed(chunk)]
    return pieces + parser.finish()


def merged(pieces: list[Piece]) -> list[Piece]:
    """Adjacent text and argument pieces joined: what a client sees once deltas are joined."""
    result: list[Piece] = []
    for piece in pieces:
        last = result[-1] if result else None
        if isinstance(piece, MessageText) and isinstance(last, MessageText):
            result[-1] = MessageText(last.text + piece.text)
        elif isinstance(piece, ArgumentsDelta) and isinstance(last, ArgumentsDelta):
            result[-1] = ArgumentsDelta(piece.index, last.text + piece.text)
        else:
            result.append(piece)
    return result


def random_chunks(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    chunks, start = [], 0
    while start < len(text):
        size = rng.randint(1, 7)
        chunks.append(text[start : start + size])
        start += size
    return chunks


def test_text_and_two_calls() -> None:
    assert merged(parse([TWO_CALLS])) == [
        MessageText("I will check."),
        CallStarted(0, "get_weather"),
        ArgumentsDelta(0, '{"city": "Paris", "days": [1, {"note": "}"}]}'),
        CallEnded(0, '{"city": "Paris", "days": [1, {"note": "}"}]}'),
        CallStarted(1, "crm.find"),
        ArgumentsDelta(1, "{}"),
        CallEnded(1, "{}"),
    ]


@pytest.mark.parametrize("text", [
    TWO_CALLS,
    "Hello <tool world <tool_call",
    '<tool_call>{"arguments": {"x": 1}, "name": "late"}</tool_call> after',
    '<tool_call>{"name": "no_arguments"}</tool_call>',
    '<tool_call>{"nam": "x"}</tool_call>tail',
    '<tool_call>\n{"name": "cut", "arguments": {"city": "Par',
    '<tool_call>{"name": "n", "arguments": 12 }</tool_call>',
])
def test_pieces_do_not_depend_on_how_the_text_is_cut(text: str) -> None:
    whole = merged(parse([text]))
    for seed in range(40):
        assert merged(parse(random_chunks(text, seed))) == whole, seed


@pytest.mark.parametrize("seed", range(10))
def test_joined_argument_deltas_equal_the_final_arguments(seed: int) -> None:
    pieces = parse(random_chunks(TWO_CALLS, seed))
    for ended in (piece for piece in pieces if isinstance(piece, CallEnded)):
        deltas = [p.text for p in pieces if isinstance(p, ArgumentsDelta) and p.index == ended.index]
        assert "".join(deltas) == ended.arguments
    assert sum(isinstance(piece, ArgumentsDelta) for piece in pieces) > 2


def test_arguments_stream_before_the_call_closes() -> None:
    parser = ToolCallParser()
    assert parser.feed('<tool_call>\n{"name": "f", "arguments": {"city": "Pa') == [
        CallStarted(0, "f"), ArgumentsDelta(0, '{"city": "Pa'),
    ]
    assert parser.feed('ris"}') == [ArgumentsDelta(0, 'ris"}')]
    assert parser.feed("}\n</tool_call>") == [CallEnded(0, '{"city": "Paris"}')]


def test_text_that_may_open_a_call_waits_and_plain_text_does_not() -> None:
    parser = ToolCallParser()
    assert parser.feed("Sure") == [MessageText("Sure")]
    assert parser.feed(" thing \n<tool_") == [MessageText(" thing")]
    assert parser.feed("box>") == [MessageText(" \n<tool_box>")]
    assert parser.finish() == []


def test_a_block_without_a_name_is_dropped_and_a_cut_call_ends_with_what_it_has() -> None:
    assert merged(parse(['Hi.<tool_call>{"x": 1}</tool_call> Bye.'])) == [MessageText("Hi.Bye.")]
    assert parse(['<tool_call>{"name": "f", "arguments": {"a": '])[-1] == CallEnded(0, '{"a":')
    assert parse(["<tool_call>\n{\"na"]) == []
    # Cut after the name: the call starts with no arguments yet, none made up.
    assert parse(['<tool_call>{"name": "f"']) == [CallStarted(0, "f"), CallEnded(0, "")]


def test_whitespace_beside_calls_and_at_the_end_is_not_text() -> None:
    pieces = parse(["  \n<tool_call>", '{"name": "f", "arguments": {}}', "</tool_call>\n\n", "  "])
    assert not any(isinstance(piece, MessageText) for piece in pieces)
    assert parse(["Hi there.\n\n"]) == [MessageText("Hi there.")]
