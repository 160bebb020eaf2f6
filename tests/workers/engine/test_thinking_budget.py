"""Thinking budget on the real default model with thinking enabled: exactly N tokens between
the markers, forced end markers one token per step, channels, and resumed think state."""

from __future__ import annotations

import dataclasses

import pytest

from events import RequestAccepted, SamplingSettings
from tests.workers.engine.conftest import plain_decoding, run_to_completion
from workers.engine import SamplingParams
from workers.engine.sampling_params import SamplingParams as Params
from workers.engine.sampling_params import sampling_params_of
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import (
    ReasoningMarkers,
    ThinkEvent,
    ThinkingBudget,
    holds_answer_open,
)

QUESTION = "Think step by step: how many minutes are there in a week?"


def thinking_params(budget, max_tokens=48) -> SamplingParams:
    # ignore_eos keeps a model that would stop early thinking, so the budget is what ends it.
    return SamplingParams.of(
        temperature=0.0, max_output_tokens=max_tokens, ignore_eos=True, thinking_token_budget=budget
    )


def index_of(token_ids: list[int], marker: list[int]) -> int:
    for start in range(len(token_ids) - len(marker) + 1):
        if token_ids[start : start + len(marker)] == marker:
            return start
    return -1


@pytest.fixture(scope="module")
def thinking_prompt(render_prompt):
    prompt, opens_reasoning = render_prompt(QUESTION, enable_thinking=True)
    assert opens_reasoning
    return prompt


@pytest.mark.parametrize("budget", [0, 1, 5, 32])
def test_budget_puts_exactly_n_tokens_between_the_markers(
    make_engine, loaded_model, thinking_prompt, budget
):
    end_marker = loaded_model.tokenizer.encode(loaded_model.profile.reasoning_end)
    engine = make_engine(speculation=plain_decoding())
    engine.add_request(
        "r", thinking_prompt, thinking_params(budget, budget + 10), prompt_opens_reasoning=True
    )
    generation = run_to_completion(engine)["r"]
    token_ids = generation.token_ids
    # The prompt opened the block, so everything before the end marker is reasoning.
    assert index_of(token_ids, end_marker) == budget
    assert generation.final.num_reasoning_tokens == budget
    ended = [output.reasoning_ended for output in generation.outputs if output.reasoning_ended]
    assert ended == ["budget"]
    assert generation.outputs[budget + len(end_marker) - 1].reasoning_ended == "budget"
    reasoning_ids = [
        token_id
        for output in generation.outputs
        for delta in output.deltas
        if delta.channel == "reasoning"
        for token_id in delta.token_ids
    ]
    assert reasoning_ids == token_ids[:budget]
    tokenizer = loaded_model.tokenizer
    assert generation.text("reasoning") == tokenizer.decode(token_ids[:budget])
    assert generation.text("text") == tokenizer.decode(token_ids[budget + len(end_marker) :])
    assert "</think>" not in generation.text("reasoning") + generation.text("text")


@pytest.mark.parametrize("budget", [None, -1])
def test_no_budget_never_forces_the_end_marker(make_engine, loaded_model, thinking_prompt, budget):
    # As a request sends it: the event turns -1 into None before the engine sees it.
    request = RequestAccepted(
        response_id="resp_1", seq=0, model="m", messages=(), thinking_token_budget=budget,
        sampling=SamplingSettings(temperature=0.0, max_output_tokens=24, ignore_eos=True),
    )
    engine = make_engine()
    engine.add_request(
        "r", thinking_prompt, sampling_params_of(request), prompt_opens_reasoning=True
    )
    generation = run_to_completion(engine)["r"]
    end_marker = loaded_model.tokenizer.encode(loaded_model.profile.reasoning_end)
    assert index_of(generation.token_ids, end_marker) == -1
    assert all(output.reasoning_ended is None for output in generation.outputs)
    assert generation.final.num_reasoning_tokens == 24
    assert generation.text("text") == ""


def test_a_multi_token_end_marker_is_forced_one_token_per_step(
    make_engine, loaded_model, render_prompt
):
    profile = dataclasses.replace(
        loaded_model.profile, reasoning_start="<reasoning>", reasoning_end="</reasoning>"
    )
    loaded = dataclasses.replace(loaded_model, profile=profile)
    end_marker = loaded.tokenizer.encode("</reasoning>")
    assert len(end_marker) >= 3
    prompt = render_prompt(QUESTION)[0] + loaded.tokenizer.encode("<reasoning>\n")
    budget = 4
    engine = make_engine(loaded, speculation=plain_decoding())
    engine.add_request("r", prompt, thinking_params(budget, 12), prompt_opens_reasoning=True)
    generation = run_to_completion(engine)["r"]
    per_step = [output.new_token_ids for output in generation.outputs]
    assert all(len(token_ids) == 1 for token_ids in per_step)
    assert [token_ids[0] for token_ids in per_step[budget : budget + len(end_marker)]] == end_marker
    assert [output.reasoning_ended for output in generation.outputs].count("budget") == 1
    assert generation.outputs[budget + len(end_marker) - 1].reasoning_ended == "budget"
    assert generation.final.num_reasoning_tokens == budget
    everything = generation.text("reasoning") + generation.text("text")
    assert "</reasoning>" not in everything and "</" not in everything


def test_resumed_request_keeps_its_think_state(make_engine, loaded_model, thinking_prompt):
    budget = 6
    params = thinking_params(budget, 20)
    engine = make_engine(speculation=plain_decoding())
    engine.add_request("full", thinking_prompt, params, prompt_opens_reasoning=True)
    full = run_to_completion(engine)["full"]
    end_marker_length = len(loaded_model.tokenizer.encode(loaded_model.profile.reasoning_end))
    # Resume inside the block, and again halfway through the forced end marker.
    for emitted_before in (3, budget + 1, budget + end_marker_length + 2):
        resumed_engine = make_engine()
        resumed_engine.add_request(
            "resumed",
            thinking_prompt,
            params,
            output_token_ids=full.token_ids[:emitted_before],
            prompt_opens_reasoning=True,
        )
        resumed = run_to_completion(resumed_engine)["resumed"]
        assert resumed.token_ids == full.token_ids[emitted_before:], emitted_before
        assert resumed.final.num_reasoning_tokens == budget
        streamed_before = [
            (delta.channel, delta.text)
            for output in full.outputs[:emitted_before]
            for delta in output.deltas
        ]
        streamed_after = [
            (delta.channel, delta.text) for output in resumed.outputs for delta in output.deltas
        ]
        for channel in ("reasoning", "text"):
            assert "".join(
                text for kind, text in streamed_before + streamed_after if kind == channel
            ) == full.text(channel)


def test_budget_without_reasoning_markers_is_rejected(make_engine, loaded_model, render_prompt):
    profile = dataclasses.replace(loaded_model.profile, reasoning_start=None, reasoning_end=None)
    engine = make_engine(dataclasses.replace(loaded_model, profile=profile))
    with pytest.raises(ValueError):
        engine.add_request("r", render_prompt("Hi")[0], thinking_params(4))


# The logic itself, on made-up token ids: start marker [7, 8], end marker [9, 10, 11].
MARKERS = ReasoningMarkers(start_token_ids=(7, 8), end_token_ids=(9, 10, 11))


def feed(budget_logic, seq, token_ids):
    events = []
    for token_id in token_ids:
        forced = budget_logic.forced_token(seq)
        token_id = forced if forced is not None else token_id
        seq.append_token(token_id)
        events.append((token_id, budget_logic.observe(seq, token_id)))
    return events


def make_sequence(budget, opens=False):
    seq = Sequence("r", 0, [1, 2, 3], Params(thinking_token_budget=budget), max_num_tokens=100)
    logic = ThinkingBudget(MARKERS)
    logic.begin(seq, prompt_opens_reasoning=opens)
    return seq, logic


def test_generated_start_marker_opens_a_block_and_a_later_block_gets_a_fresh_budget():
    seq, logic = make_sequence(budget=2)
    # Zeros stand for the steps whose token is forced anyway.
    events = feed(logic, seq, [5, 7, 8, 20, 21, 0, 0, 0, 7, 8, 30, 31, 0, 0, 0])
    tokens = [token_id for token_id, _ in events]
    # Two reasoning tokens, then the forced end marker, in each block.
    assert tokens == [5, 7, 8, 20, 21, 9, 10, 11, 7, 8, 30, 31, 9, 10, 11]
    assert [event for _, event in events if event] == [
        ThinkEvent.OPENED,
        ThinkEvent.CLOSED_BY_BUDGET,
        ThinkEvent.OPENED,
        ThinkEvent.CLOSED_BY_BUDGET,
    ]
    assert seq.think.num_reasoning_tokens == 4 and logic.reasoning_tokens(seq) == 4


def test_model_emitted_end_marker_closes_the_block_with_cause_model():
    seq, logic = make_sequence(budget=None, opens=True)
    events = feed(logic, seq, [20, 21, 9, 10, 11, 40])
    assert [event for _, event in events if event] == [ThinkEvent.CLOSED_BY_MODEL]
    assert logic.reasoning_tokens(seq) == 2


def test_partial_marker_is_reasoning_once_the_budget_forces_the_real_one():
    seq, logic = make_sequence(budget=3, opens=True)
    events = feed(logic, seq, [20, 9, 10, 99, 99, 99, 99])
    assert [token_id for token_id, _ in events][:6] == [20, 9, 10, 9, 10, 11]
    assert logic.reasoning_tokens(seq) == 3
    assert logic.partial_marker_length(seq) == 0


def test_budget_zero_forces_the_end_marker_first():
    seq, logic = make_sequence(budget=0, opens=True)
    events = feed(logic, seq, [99, 99, 99, 99])
    assert [token_id for token_id, _ in events] == [9, 10, 11, 99]
    assert events[2][1] is ThinkEvent.CLOSED_BY_BUDGET
    assert logic.reasoning_tokens(seq) == 0


def test_a_budgeted_sequence_may_not_end_inside_its_block_or_before_its_answer():
    """Which steps of a budgeted request have their ending tokens masked: every free step in
    the block, and the first step after it closes; not a forced step, not the answer's
    second token, and nothing without a budget."""
    seq, logic = make_sequence(budget=2, opens=True)
    held = []
    for token_id in [20, 21, 0, 0, 0, 40, 41]:
        forced = logic.forced_token(seq)
        held.append(holds_answer_open(seq, forced))
        token_id = forced if forced is not None else token_id
        seq.append_token(token_id)
        logic.observe(seq, token_id)
    assert held == [True, True, False, False, False, True, False]

    unbudgeted, logic = make_sequence(budget=None, opens=True)
    assert not holds_answer_open(unbudgeted, logic.forced_token(unbudgeted))


ENDS_IN_ITS_BLOCK = ("What is the capital of France?", "What is 12 + 30?")


@pytest.mark.parametrize("question", ENDS_IN_ITS_BLOCK)
def test_a_budgeted_response_ends_in_an_answer(make_engine, render_prompt, question):
    """The default model, which knows no think blocks, answers inside the block and ends
    there (EOS) when nothing holds it; with a budget it may not, so the block closes and an
    answer follows. Without a budget the same request still ends inside its block."""
    prompt, _ = render_prompt(question, enable_thinking=True)
    engine = make_engine(speculation=plain_decoding())
    engine.add_request("free", prompt, SamplingParams.of(temperature=0.0, max_output_tokens=48),
                       prompt_opens_reasoning=True)
    engine.add_request("budgeted", prompt, SamplingParams.of(
        temperature=0.0, max_output_tokens=48, thinking_token_budget=16,
    ), prompt_opens_reasoning=True)
    generations = run_to_completion(engine)
    free, budgeted = generations["free"], generations["budgeted"]
    assert free.final.finish_reason == "stop" and free.text("reasoning").strip()
    assert free.text("text") == ""
    assert budgeted.text("reasoning").strip() and budgeted.text("text").strip()
    assert [o.reasoning_ended for o in budgeted.outputs if o.reasoning_ended] == ["budget"]


def test_the_answer_does_not_end_at_its_first_token(make_engine, loaded_model, thinking_prompt):
    """The first token after the forced end marker may not end the response: here the token
    the model writes there is made a stop token, which without the rule would end the
    response with an empty answer."""
    params = SamplingParams.of(temperature=0.0, max_output_tokens=12, thinking_token_budget=4)
    engine = make_engine(speculation=plain_decoding())
    engine.add_request("probe", thinking_prompt, params, prompt_opens_reasoning=True)
    probe = run_to_completion(engine)["probe"].token_ids
    end_marker = loaded_model.tokenizer.encode(loaded_model.profile.reasoning_end)
    first_answer_token = probe[4 + len(end_marker)]

    engine.add_request("r", thinking_prompt, dataclasses.replace(
        params, sampling=params.sampling.model_copy(update={"stop_token_ids": (first_answer_token,)})
    ), prompt_opens_reasoning=True)
    generation = run_to_completion(engine)["r"]
    answer_ids = generation.token_ids[4 + len(end_marker):]
    assert answer_ids and answer_ids[0] != first_answer_token
    assert generation.text("text")


def test_whitespace_alone_does_not_begin_the_answer():
    seq = Sequence("r", 0, [1, 2, 3], Params(thinking_token_budget=1), max_num_tokens=100)
    logic = ThinkingBudget(MARKERS, blank_token_ids=frozenset({50}))
    logic.begin(seq, prompt_opens_reasoning=True)
    held = []
    for token_id in [20, 0, 0, 0, 50, 50, 41, 50]:
        forced = logic.forced_token(seq)
        held.append(holds_answer_open(seq, forced))
        token_id = forced if forced is not None else token_id
        seq.append_token(token_id)
        logic.observe(seq, token_id)
    assert held == [True, False, False, False, True, True, True, False]


def test_blank_tokens_of_the_default_model(loaded_model):
    tokenizer = loaded_model.tokenizer
    blank = tokenizer.blank_token_ids()
    assert set(tokenizer.encode("\n\n  \n")) <= blank
    assert not blank & set(tokenizer.encode("Paris, France."))
    assert not blank & set(tokenizer.eos_token_ids)
