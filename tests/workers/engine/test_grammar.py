"""Constrained decoding on the real default model: the answer follows its grammar (greedy
and sampled, beside unconstrained rows), the think block stays free, a resumed request
continues on its grammar, and a finished grammar ends the request."""

from __future__ import annotations

import json
import re

import pytest

from tests.workers.engine.conftest import run_to_completion
from workers.engine import SamplingParams
from workers.engine.grammar import GrammarCompiler

PHONE = {"type": "regex", "pattern": r"\d{3}-\d{3}-\d{4}"}
YES_NO = {"type": "or", "elements": [
    {"type": "const_string", "value": "yes"}, {"type": "const_string", "value": "no"},
]}
PERSON = {"type": "json_schema", "max_whitespace_cnt": 1, "json_schema": {
    "type": "object", "additionalProperties": False, "required": ["name", "age"],
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
}}


@pytest.fixture(scope="module")
def grammars(loaded_model) -> GrammarCompiler:
    return GrammarCompiler(loaded_model.tokenizer, loaded_model.config.vocab_size)


def constrained(grammars, fmt, max_tokens: int, **overrides) -> SamplingParams:
    overrides.setdefault("temperature", 0.0)
    return SamplingParams.of(max_output_tokens=max_tokens, grammar=grammars.compile(fmt), **overrides)


def test_the_answer_matches_its_grammar(make_engine, render_prompt, grammars):
    engine = make_engine()
    engine.add_request("phone", render_prompt("Give a phone number.")[0], constrained(grammars, PHONE, 30))
    engine.add_request("json", render_prompt("Describe Alice, 30.")[0], constrained(grammars, PERSON, 40))
    generations = run_to_completion(engine)
    assert re.fullmatch(r"\d{3}-\d{3}-\d{4}", generations["phone"].text())
    person = json.loads(generations["json"].text())
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    assert {g.final.finish_reason for g in generations.values()} == {"stop"}


def test_sampled_rows_follow_their_grammar_and_free_rows_are_untouched(make_engine, render_prompt, grammars):
    free_prompt = render_prompt("What is the capital of France?")[0]
    alone = make_engine()
    alone.add_request("free", free_prompt, SamplingParams.of(temperature=0.0, max_output_tokens=12))
    expected = run_to_completion(alone)["free"].token_ids

    engine = make_engine()
    engine.add_request("free", free_prompt, SamplingParams.of(temperature=0.0, max_output_tokens=12))
    for seed in range(2):
        engine.add_request(f"sampled-{seed}", render_prompt("Describe someone.")[0],
                           constrained(grammars, PERSON, 48, temperature=1.0, seed=seed))
    generations = run_to_completion(engine)
    assert generations["free"].token_ids == expected
    for seed in range(2):
        generation = generations[f"sampled-{seed}"]
        assert generation.final.finish_reason == "stop"
        person = json.loads(generation.text())
        assert len(person["name"]) <= 12 and 0 <= person["age"] <= 120


def test_the_think_block_is_free_and_the_answer_constrained(make_engine, render_prompt, grammars):
    prompt, opens = render_prompt("Is water wet?", enable_thinking=True)
    assert opens
    engine = make_engine()
    engine.add_request("thinks", prompt, constrained(grammars, YES_NO, 20, thinking_token_budget=5),
                       prompt_opens_reasoning=True)
    generation = run_to_completion(engine)["thinks"]
    assert [o.reasoning_ended for o in generation.outputs if o.reasoning_ended] == ["budget"]
    assert generation.final.num_reasoning_tokens == 5
    assert generation.text("reasoning") not in ("yes", "no")
    assert generation.text() in ("yes", "no")


def test_a_resumed_request_continues_on_its_grammar(make_engine, render_prompt, grammars):
    prompt = render_prompt("Describe Alice, 30.")[0]
    full_engine = make_engine()
    full_engine.add_request("full", prompt, constrained(grammars, PERSON, 40))
    full = run_to_completion(full_engine)["full"]
    emitted_before = 6
    engine = make_engine()
    engine.add_request("resumed", prompt, constrained(grammars, PERSON, 40),
                       output_token_ids=full.token_ids[:emitted_before])
    resumed = run_to_completion(engine)["resumed"]
    assert resumed.token_ids == full.token_ids[emitted_before:]
    replayed = "".join(d.text for d in resumed.outputs[0].replayed_deltas)
    assert replayed + resumed.text() == full.text()
    assert all(not output.replayed_deltas for output in resumed.outputs[1:])


def test_a_finished_grammar_ends_the_request_even_with_ignore_eos(make_engine, render_prompt, grammars):
    engine = make_engine()
    engine.add_request("choice", render_prompt("Is the sky blue?")[0],
                       constrained(grammars, YES_NO, 20, ignore_eos=True))
    generation = run_to_completion(engine)["choice"]
    assert generation.text() in ("yes", "no")
    assert generation.final.finish_reason == "stop"
    assert len(generation.token_ids) < 20
