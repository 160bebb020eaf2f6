"""A constrained answer survives thinking (real default model, greedy): a request whose
grammar needs an answer cannot end inside its think block, so the block closes through its
end marker and the grammar then shapes the answer, at every budget, including budgets the
unconstrained model would not reach because it stops while thinking."""

from __future__ import annotations

import json

import pytest

from events import ChatMessage, RequestAccepted, ToolDefinition
from tests.workers.engine.conftest import run_to_completion
from workers.engine import SamplingParams
from workers.engine.grammar import GrammarCompiler
from workers.output.structured_output import compile_answer_grammar, json_format

# Greedy, the default model thinks for about 47 tokens on this question and then stops
# inside its think block (checked by the first test), so 60 is a budget it never spends.
QUESTION = "Hi"
EARLY_STOP_BUDGET = 60
BUDGETS = [0, 5, EARLY_STOP_BUDGET]
MAX_TOKENS = 160
PERSON = json_format({"type": "object", "required": ["name"], "additionalProperties": False,
                      "properties": {"name": {"type": "string", "maxLength": 16}}})
WEATHER = ToolDefinition(name="get_weather", parameters={
    "type": "object", "required": ["city"], "additionalProperties": False,
    "properties": {"city": {"type": "string", "maxLength": 8}},
})


@pytest.fixture(scope="module")
def grammars(loaded_model) -> GrammarCompiler:
    return GrammarCompiler(loaded_model.tokenizer, loaded_model.config.vocab_size)


@pytest.fixture(scope="module")
def prompt(render_prompt) -> list[int]:
    token_ids, opens = render_prompt(QUESTION, enable_thinking=True)
    assert opens
    return token_ids


def tool_grammar(grammars: GrammarCompiler, tool_choice: str):
    request = RequestAccepted(response_id="resp_t", seq=0, model="m", tools=(WEATHER,),
                              tool_choice=tool_choice, parallel_tool_calls=False,
                              messages=(ChatMessage(role="user", content=QUESTION),))
    return compile_answer_grammar(grammars, request)


def think_then_answer(make_engine, prompt, grammar, budgets=BUDGETS) -> dict:
    engine = make_engine()
    for budget in budgets:
        engine.add_request(f"budget-{budget}", prompt, SamplingParams.of(
            temperature=0.0, max_output_tokens=MAX_TOKENS, thinking_token_budget=budget, grammar=grammar,
        ), prompt_opens_reasoning=True)
    return run_to_completion(engine)


def test_unconstrained_the_model_stops_while_thinking(make_engine, prompt) -> None:
    # With no budget: a budgeted request may not end inside its block either, constrained
    # or not (workers/engine/thinking_budget.py).
    engine = make_engine()
    engine.add_request("free", prompt, SamplingParams.of(
        temperature=0.0, max_output_tokens=MAX_TOKENS), prompt_opens_reasoning=True)
    generation = run_to_completion(engine)["free"]
    assert generation.final.finish_reason == "stop"
    assert not any(output.reasoning_ended for output in generation.outputs)
    assert generation.text() == ""
    assert generation.final.num_reasoning_tokens < EARLY_STOP_BUDGET


def test_a_json_schema_answer_follows_the_think_block_at_every_budget(make_engine, prompt, grammars) -> None:
    generations = think_then_answer(make_engine, prompt, grammars.compile(PERSON))
    for budget in BUDGETS:
        generation = generations[f"budget-{budget}"]
        assert generation.final.finish_reason == "stop", budget
        assert [o.reasoning_ended for o in generation.outputs if o.reasoning_ended] == ["budget"]
        assert generation.final.num_reasoning_tokens == budget
        assert set(json.loads(generation.text())) == {"name"}, budget


def test_a_required_call_follows_the_think_block_at_every_budget(make_engine, prompt, grammars) -> None:
    generations = think_then_answer(make_engine, prompt, tool_grammar(grammars, "required"))
    for budget in BUDGETS:
        assert generations[f"budget-{budget}"].final.finish_reason == "stop", budget
        text = generations[f"budget-{budget}"].text()
        assert text.startswith('<tool_call>\n{"name": "get_weather", "arguments": '), (budget, text)
        assert text.endswith("}\n</tool_call>"), (budget, text)


def test_an_answer_that_may_be_empty_leaves_the_model_free_to_stop(make_engine, prompt, grammars) -> None:
    """tool_choice "auto" lets the answer be plain text or nothing: no constraint is at stake.
    (Without a budget: a budgeted request may not end inside its block, whatever its grammar.)"""
    generation = think_then_answer(make_engine, prompt, tool_grammar(grammars, "auto"),
                                   [None])["budget-None"]
    assert generation.final.finish_reason == "stop"
    assert not any(output.reasoning_ended for output in generation.outputs)
