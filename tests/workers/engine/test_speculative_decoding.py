"""Prompt-lookup speculative decoding changes nothing but speed: the same requests with it
on and off give the same tokens and the same logprobs, bit for bit, greedy and seeded,
alone and in a batch, with stop strings, a thinking budget's cutoff and a grammar; and
drafts were really verified and kept, so the comparison is not between two plain runs."""

from __future__ import annotations

import pytest

from tests.workers.engine.conftest import run_to_completion
from tests.workers.engine.test_exact_resume import logprobs_by_position
from workers.engine import SamplingParams
from workers.engine.grammar import GrammarCompiler
from workers.engine.speculation import SpeculationConfig

QUOTED = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, lit the great "
    "lamp, wound the clockwork that turned the lens, and wrote the weather in his log."
)
QUOTE = f"Repeat this text exactly, twice, and nothing else:\n\n{QUOTED}"
JSON_EDIT = (
    'Change the age to 31 and repeat the JSON: {"name": "Ada Lovelace", "age": 30, '
    '"city": "London", "languages": ["English", "French"], "occupation": "mathematician"}'
)
PROSE = "Write a short story about a dragon who learns to bake bread."
PERSON = {"type": "json_schema", "max_whitespace_cnt": 1, "json_schema": {
    "type": "object", "additionalProperties": False, "required": ["name", "quote"],
    "properties": {"name": {"type": "string", "maxLength": 20},
                   "quote": {"type": "string", "maxLength": 160}},
}}


def params_for(sampling: str, **overrides) -> SamplingParams:
    overrides.setdefault("max_output_tokens", 24)
    if sampling == "greedy":
        return SamplingParams.of(temperature=0.0, top_logprobs=5, **overrides)
    return SamplingParams.of(temperature=0.7, top_p=0.95, seed=7, top_logprobs=5, **overrides)


def generate(make_engine, requests, speculate: bool):
    """Runs (request id, prompt, params, opens reasoning) together; every output and the
    engine's speculation totals (None with speculation off)."""
    # Drafting in batches of any size, which the default policy would not do at 8.
    engine = make_engine(speculation=SpeculationConfig(enabled=speculate, max_batch_seqs=8))
    for request_id, prompt, params, opens_reasoning in requests:
        engine.add_request(request_id, prompt, params, prompt_opens_reasoning=opens_reasoning)
    generations = run_to_completion(engine)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    stats = engine.speculator.stats if engine.speculator is not None else None
    return generations, stats


def assert_same(spoken, plain):
    assert spoken.keys() == plain.keys()
    for request_id, generation in plain.items():
        other = spoken[request_id]
        assert other.token_ids == generation.token_ids, request_id
        assert logprobs_by_position(other) == logprobs_by_position(generation), request_id
        assert other.text() == generation.text(), request_id
        assert other.text("reasoning") == generation.text("reasoning"), request_id
        assert other.final.finish_reason == generation.final.finish_reason, request_id
        assert other.final.num_reasoning_tokens == generation.final.num_reasoning_tokens


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
@pytest.mark.parametrize("streams", [1, 8])
def test_speculation_gives_the_bits_of_plain_decoding(make_engine, render_prompt, sampling, streams):
    quote, _ = render_prompt(QUOTE)
    json_edit, _ = render_prompt(JSON_EDIT)
    prose, _ = render_prompt(PROSE)
    thinking, opens = render_prompt("Think, then quote: " + QUOTED, enable_thinking=True)
    # A stop string inside the quoted text, one past its end, and a budget cut.
    stop_word = QUOTED.split()[12]
    catalogue = [
        ("quote", quote, params_for(sampling, max_output_tokens=40), False),
        ("quote-stop", quote, params_for(sampling, stop=(stop_word,)), False),
        ("json", json_edit, params_for(sampling, max_output_tokens=32), False),
        ("prose", prose, params_for(sampling), False),
        ("think", thinking, params_for(sampling, thinking_token_budget=9), opens),
        ("quote-penalized", quote, params_for(sampling, frequency_penalty=0.3), False),
        ("json-bias", json_edit, params_for(sampling, logit_bias={11: -5.0}), False),
        ("quote-long", quote, params_for(sampling, max_output_tokens=40, ignore_eos=True), False),
    ]
    requests = catalogue[:streams]
    spoken, stats = generate(make_engine, requests, speculate=True)
    plain, _ = generate(make_engine, requests, speculate=False)
    assert_same(spoken, plain)
    assert stats is not None and stats.accepted_tokens > 0, stats
    if streams == 8 and sampling == "greedy":
        stopped = plain["quote-stop"]
        assert stopped.final.finish_reason == "stop" and stop_word not in stopped.text()
        assert plain["think"].final.num_reasoning_tokens == 9


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_a_grammar_sees_the_same_answer(make_engine, render_prompt, loaded_model, sampling):
    grammars = GrammarCompiler(loaded_model.tokenizer, loaded_model.config.vocab_size)
    prompt, _ = render_prompt(f"Answer in JSON with your name and this quote: {QUOTED}")
    params = params_for(sampling, max_output_tokens=80,
                        grammar=grammars.compile({"type": "json_schema", **PERSON}))
    requests = [("json", prompt, params, False)]
    spoken, stats = generate(make_engine, requests, speculate=True)
    plain, _ = generate(make_engine, requests, speculate=False)
    assert_same(spoken, plain)
    assert stats is not None and stats.accepted_tokens > 0, stats


def test_blocks_filled_by_kept_drafts_serve_the_prefix_cache(make_engine, render_prompt):
    """Blocks whose tokens were drafted and kept are cached like decoded ones: a request
    repeating the first one's prompt and answer finds all but its last block cached."""
    prompt, _ = render_prompt(QUOTE)
    params = SamplingParams.of(temperature=0.0, max_output_tokens=64, ignore_eos=True)
    engine = make_engine()
    engine.add_request("first", prompt, params)
    first = run_to_completion(engine)["first"]
    assert engine.speculator is not None and engine.speculator.stats.accepted_tokens > 0
    again = prompt + first.token_ids
    engine.add_request("again", again, SamplingParams.of(temperature=0.0, max_output_tokens=1))
    second = run_to_completion(engine)["again"]
    block_size = engine.config.block_size
    assert second.final.num_cached_tokens >= (len(again) - 1) // block_size * block_size


def test_a_failed_verification_is_decoded_plainly(make_engine, render_prompt):
    """A verifying forward pass that raises gives its slots back and the step is decoded
    without drafts: the same tokens, no block leaked."""
    prompt, _ = render_prompt(QUOTE)
    params = SamplingParams.of(temperature=0.0, max_output_tokens=32, ignore_eos=True)
    plain, _ = generate(make_engine, [("r", prompt, params, False)], speculate=False)
    engine = make_engine()
    score = engine.model_runner.score
    calls = {"count": 0}

    def failing_every_other(seqs, drafts):  # type: ignore[no-untyped-def]
        calls["count"] += 1
        if calls["count"] % 2:
            raise RuntimeError("verification failed")
        return score(seqs, drafts)

    engine.model_runner.score = failing_every_other
    engine.add_request("r", prompt, params)
    generation = run_to_completion(engine)["r"]
    assert calls["count"] >= 2
    assert generation.token_ids == plain["r"].token_ids
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
