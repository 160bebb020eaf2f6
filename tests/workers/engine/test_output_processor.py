"""OutputProcessor with the real tokenizer: channel split at think markers, hold-back of
possible markers and stop strings, and finishing."""

from __future__ import annotations

import pytest

from workers.engine.output_processor import OutputProcessor
from workers.engine.sampling_params import SamplingParams
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import ReasoningMarkers, ThinkingBudget


@pytest.fixture(scope="module")
def tokenizer(loaded_model):
    return loaded_model.tokenizer


def stream(tokenizer, text: str, params: SamplingParams, opens_reasoning: bool = False):
    """Feeds the tokens of `text` one step at a time; returns per-step deltas and the finish
    reason."""
    markers = ReasoningMarkers.from_strings("<think>", "</think>", tokenizer.encode)
    thinking = ThinkingBudget(markers)
    processor = OutputProcessor(tokenizer, thinking)
    seq = Sequence("r", 0, tokenizer.encode("Hi"), params, max_num_tokens=10_000)
    thinking.begin(seq, opens_reasoning)
    processor.begin(seq)
    steps = []
    token_ids = tokenizer.encode(text)
    for index, token_id in enumerate(token_ids):
        seq.append_token(token_id)
        event = thinking.observe(seq, token_id)
        last = index == len(token_ids) - 1
        finish_reason = processor.process_token(
            seq, token_id, None, event, "length" if last else None
        )
        steps.append([(delta.channel, delta.text) for delta in processor.take_deltas(seq)])
        if finish_reason is not None:
            return steps, finish_reason
    return steps, None


def joined(steps, channel):
    return "".join(text for step in steps for kind, text in step if kind == channel)


def test_generated_think_block_goes_to_the_reasoning_channel_without_markers(tokenizer):
    # Markers are matched as the token ids their strings encode to; "\n" keeps this text's
    # tokenization of them the standalone one (".<" would be a token of its own).
    steps, finish_reason = stream(
        tokenizer, "Sure.\n<think>\nLet me see.\n</think>\nThe answer is 4.", SamplingParams()
    )
    assert joined(steps, "text") == "Sure.\n\nThe answer is 4."
    assert joined(steps, "reasoning") == "\nLet me see.\n"
    assert finish_reason == "length"


def test_a_possible_marker_waits_and_is_released_when_it_is_not_one(tokenizer):
    steps, _ = stream(tokenizer, "a.</b> c", SamplingParams(), opens_reasoning=True)
    assert joined(steps, "reasoning") == "a.</b> c"
    # "</" opens the end marker, so its text waits for the step that rules the marker out.
    texts = ["".join(text for _, text in step) for step in steps]
    assert texts[:4] == ["a", ".", "", "</b"]


def test_prompt_opened_block_streams_reasoning_first(tokenizer):
    steps, _ = stream(tokenizer, "hmm, four.</think>4", SamplingParams(), opens_reasoning=True)
    assert joined(steps, "reasoning") == "hmm, four."
    assert joined(steps, "text") == "4"


def test_stop_strings_match_in_the_answer_only(tokenizer):
    params = SamplingParams.of(stop=["STOP"])
    steps, finish_reason = stream(
        tokenizer,
        "I could STOP here.</think>Answer then STOP and more",
        params,
        opens_reasoning=True,
    )
    assert joined(steps, "reasoning") == "I could STOP here."
    assert joined(steps, "text") == "Answer then "
    assert finish_reason == "stop"


def test_text_held_for_a_stop_string_is_released_at_the_end(tokenizer):
    steps, finish_reason = stream(tokenizer, "wait for it ST", SamplingParams.of(stop=["STOP"]))
    assert joined(steps, "text") == "wait for it ST"
    assert finish_reason == "length"
