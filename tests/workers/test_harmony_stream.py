"""spate's harmony stream parser against openai-harmony's StreamableParser: over completions
with reasoning, answers, preambles and calls (tokenized by the library's own vocabulary),
fed token by token and cut in two at every character, both find the same messages (author,
channel, recipient, content type, text), and spate's pieces add up to them: reasoning text,
message text, and each call with its name and streamed arguments."""

from __future__ import annotations

import openai_harmony as oh
import pytest

from tests.harmony_reference import harmony_encoding
from workers.output.harmony_stream import (
    HarmonyPiece,
    HarmonyStreamParser,
    ReasoningText,
    parse_header,
)
from workers.output.tool_calls import ArgumentsDelta, CallEnded, CallStarted, MessageText

COMPLETIONS = [
    "<|channel|>analysis<|message|>Two and two.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
    "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary"
    ' to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    "<|channel|>commentary<|message|>Checking <now>.<|end|>"
    "<|start|>assistant to=functions.lookup<|channel|>commentary<|message|>{}<|call|>",
    "<|channel|>final<|message|>Héllo 日本語 <b>x</b> | end<|return|>",
    "<|channel|>analysis to=python code<|message|>print(1 < 2)<|call|>",
    '<|channel|>commentary to=docs.search<|constrain|>json<|message|>{"q": "a b"}<|call|>',
    "<|channel|>analysis<|message|>Long.<|end|><|start|>assistant<|channel|>analysis<|message|>"
    "More.<|end|><|start|>assistant<|channel|>final<|message|>Done",
]


def reference(completion: str) -> tuple[list[tuple[str, str | None, str | None, str | None, str]],
                                         list[int]]:
    """The library's messages, and the tokens of the completion."""
    encoding = harmony_encoding()
    tokens = encoding.encode(completion, allowed_special="all")
    parser = oh.StreamableParser(encoding, oh.Role.ASSISTANT)
    for token in tokens:
        parser.process(token)
    parser.process_eos()
    messages = [(m.author.role.value, m.channel, m.recipient, m.content_type, m.content[0].text)
                for m in parser.messages]
    return messages, tokens


def spate(pieces_of_text: list[str]) -> tuple[HarmonyStreamParser, list[HarmonyPiece]]:
    parser = HarmonyStreamParser()
    pieces = [piece for text in pieces_of_text for piece in parser.feed(text)]
    return parser, pieces + parser.finish()


def summary(parser: HarmonyStreamParser) -> list[tuple[str, str | None, str | None, str | None, str]]:
    return [(h.role, h.channel, h.recipient, h.content_type, text) for h, text in parser.messages]


def token_texts(tokens: list[int]) -> list[str]:
    """The text each token streams as; the stop token that ends generation streams none."""
    encoding = harmony_encoding()
    if tokens[-1] in encoding.stop_tokens_for_assistant_actions():
        tokens = tokens[:-1]
    return [encoding.decode_utf8([token]) for token in tokens]


def by_kind(pieces: list[HarmonyPiece]) -> tuple[str, str, list[tuple[str, str]]]:
    """(reasoning text, message text, [(call name, arguments)]), checking each call's
    deltas add up to its ended arguments."""
    reasoning = "".join(p.text for p in pieces if isinstance(p, ReasoningText))
    message = "".join(p.text for p in pieces if isinstance(p, MessageText))
    calls: list[tuple[str, str]] = []
    for started in (p for p in pieces if isinstance(p, CallStarted)):
        streamed = "".join(p.text for p in pieces
                           if isinstance(p, ArgumentsDelta) and p.index == started.index)
        ended = [p for p in pieces if isinstance(p, CallEnded) and p.index == started.index]
        assert len(ended) == 1 and ended[0].arguments == streamed
        calls.append((started.name, streamed))
    return reasoning, message, calls


@pytest.mark.parametrize("completion", COMPLETIONS)
def test_the_parsers_agree_token_by_token(completion: str) -> None:
    expected, tokens = reference(completion)
    parser, pieces = spate(token_texts(tokens))
    assert summary(parser) == expected
    reasoning, message, calls = by_kind(pieces)
    assert reasoning == "".join(text for _, channel, to, _, text in expected
                                if channel == "analysis" and to is None)
    assert message == "".join(text for _, channel, to, _, text in expected
                              if channel != "analysis" and to is None)
    assert calls == [(to.removeprefix("functions."), text)
                     for _, _, to, _, text in expected if to is not None]


@pytest.mark.parametrize("completion", COMPLETIONS)
def test_any_cut_gives_the_same_pieces(completion: str) -> None:
    _, tokens = reference(completion)
    text = "".join(token_texts(tokens))
    whole_parser, whole = spate([text])
    for cut in range(len(text) + 1):
        parser, pieces = spate([text[:cut], text[cut:]])
        assert summary(parser) == summary(whole_parser), cut
        assert by_kind(pieces) == by_kind(whole), cut


def test_a_call_is_named_once_its_header_ends_and_streams_its_arguments() -> None:
    parser = HarmonyStreamParser()
    assert parser.feed("<|channel|>commentary to=functions.get_weather <|constrain|>js") == []
    assert parser.feed('on<|message|>{"ci') == [CallStarted(0, "get_weather"),
                                                ArgumentsDelta(0, '{"ci')]
    assert parser.feed('ty": "Paris"}') == [ArgumentsDelta(0, 'ty": "Paris"}')]
    assert parser.finish() == [CallEnded(0, '{"city": "Paris"}')]


def test_text_that_may_end_a_message_waits() -> None:
    parser = HarmonyStreamParser()
    assert parser.feed("<|channel|>final<|message|>a <|e") == [MessageText("a ")]
    assert parser.feed("nd") == []
    assert parser.feed("less|>") == [MessageText("<|endless|>")]


@pytest.mark.parametrize("header", [
    "assistant<|channel|>commentary to=functions.f <|constrain|>json",
    "assistant to=functions.f<|channel|>commentary <|constrain|>json",
    "assistant<|channel|>analysis to=python code",
    "functions.f to=assistant<|channel|>commentary",
    "assistant<|channel|>final",
])
def test_headers_read_as_harmony_reads_them(header: str) -> None:
    encoding = harmony_encoding()
    parser = oh.StreamableParser(encoding, None)
    for token in encoding.encode(f"<|start|>{header}<|message|>x<|end|>", allowed_special="all"):
        parser.process(token)
    message = parser.messages[0]
    parsed = parse_header(header, None)
    assert (parsed.role, parsed.channel, parsed.recipient, parsed.content_type) == (
        message.author.role.value, message.channel, message.recipient, message.content_type)
