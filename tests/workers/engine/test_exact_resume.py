"""A response resumed by another engine (prompt plus the tokens already emitted, prefilled
in one piece) continues with the very bits of the uninterrupted run: the same logprobs at
the first resumed step and the same tokens after it, greedy and seeded, in fp32, in bf16,
in the served mix (fp32 with bf16 linears) and with the GGUF file's quantized weights on
the fused CPU op. Also a prompt served after a cached prefix."""

from __future__ import annotations

import pytest

from kernels import cpu_ops
from tests.workers.engine.conftest import run_to_completion
from workers.engine import SamplingParams

TOKENS = 18
# Early, midway and at the last step.
RESUME_POINTS = (1, 9, 17)
TOP_LOGPROBS = 20


def logprobs_by_position(generation) -> list:
    """Per generated token: (token id, its logprob, the top alternatives), in order."""
    return [
        (entry.token_id, entry.logprob, tuple(entry.top_logprobs))
        for output in generation.outputs
        for delta in output.deltas
        for entry in delta.logprobs
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "served", "quantized"])
@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_resume_gives_the_uninterrupted_bits(
    dtype, sampling, make_engine, render_prompt, loaded_model, bf16_model, served_model,
    quantized_model,
):
    if dtype == "quantized" and not cpu_ops.available():
        pytest.skip("torch's int4/int8 kernels give a prefilled row other bits than a decode step")
    model = {
        "float32": loaded_model, "bfloat16": bf16_model, "served": served_model,
        "quantized": quantized_model,
    }[dtype]
    prompt, _ = render_prompt("Write a long story about a lighthouse keeper and the sea.")
    temperature = 0.0 if sampling == "greedy" else 0.8
    params = SamplingParams.of(
        temperature=temperature, seed=None if sampling == "greedy" else 11,
        max_output_tokens=TOKENS, ignore_eos=True, top_logprobs=TOP_LOGPROBS,
    )
    engine = make_engine(model)
    engine.add_request("whole", prompt, params)
    whole = run_to_completion(engine)["whole"]
    tokens = whole.token_ids
    assert len(tokens) == TOKENS
    # Logprobs come with text deltas, so align them with tokens through the token ids.
    whole_logprobs = logprobs_by_position(whole)
    assert [entry[0] for entry in whole_logprobs] == tokens

    mismatches = []
    for emitted in RESUME_POINTS:
        engine = make_engine(model)
        engine.add_request("resumed", prompt, params, output_token_ids=tokens[:emitted])
        resumed = run_to_completion(engine)["resumed"]
        resumed_logprobs = logprobs_by_position(resumed)
        if resumed.token_ids != tokens[emitted:]:
            mismatches.append((emitted, "tokens", resumed.token_ids, tokens[emitted:]))
        elif resumed_logprobs != whole_logprobs[emitted:]:
            first = next(
                index for index, (a, b) in enumerate(
                    zip(resumed_logprobs, whole_logprobs[emitted:], strict=True)
                ) if a != b
            )
            mismatches.append((emitted, "logprobs", first))
    assert not mismatches, mismatches


def test_a_cached_prefix_gives_the_bits_of_a_fresh_prefill(make_engine, render_prompt):
    """The second request's prompt is prefilled after cached blocks (a query chunk attends
    to a cached prefix): its logprobs equal the first, whole prefill's, bit for bit."""
    prompt, _ = render_prompt("Write a long essay about the history of Rome. " * 4)
    params = SamplingParams.of(temperature=0.0, max_output_tokens=12, ignore_eos=True,
                            top_logprobs=TOP_LOGPROBS)
    engine = make_engine()
    engine.add_request("fresh", prompt, params)
    fresh = run_to_completion(engine)["fresh"]
    engine.add_request("cached", prompt, params)
    cached = run_to_completion(engine)["cached"]
    assert cached.final.num_cached_tokens > 0
    assert logprobs_by_position(cached) == logprobs_by_position(fresh)


@pytest.mark.parametrize("dtype", ["float32", "quantized"])
def test_tokens_lent_by_a_cached_block_give_the_bits_of_a_fresh_prefill(
    dtype, make_engine, render_prompt, loaded_model, quantized_model
):
    """A prompt that leaves a cached one mid-block: the shared tokens of that block are
    copied from the cache, not computed, and the answer's logprobs equal a fresh
    prefill's, bit for bit."""
    if dtype == "quantized" and not cpu_ops.available():
        pytest.skip("torch's int4/int8 kernels give a prefilled row other bits than a decode step")
    model = loaded_model if dtype == "float32" else quantized_model
    prompt, _ = render_prompt("Write a long essay about the history of Rome. " * 4)
    block_size = make_engine(model).config.block_size
    cut = 2 * block_size + 5
    other = prompt[:cut] + prompt[cut + 1 :]
    params = SamplingParams.of(temperature=0.0, max_output_tokens=8, ignore_eos=True,
                            top_logprobs=TOP_LOGPROBS)
    fresh_engine = make_engine(model)
    fresh_engine.add_request("other", other, params)
    fresh = run_to_completion(fresh_engine)["other"]
    engine = make_engine(model)
    engine.add_request("first", prompt, params)
    run_to_completion(engine)
    engine.add_request("other", other, params)
    lent = run_to_completion(engine)["other"]
    assert fresh.final.num_cached_tokens == 0
    assert lent.final.num_cached_tokens == cut
    assert logprobs_by_position(lent) == logprobs_by_position(fresh)


def test_a_lending_block_evicted_in_the_same_step_still_lends_its_tokens(
    make_engine, render_prompt
):
    """With a pool just big enough, the borrower's own new blocks evict the block that
    lends it tokens: the copy is made before the step writes anything, so the answer
    still equals a fresh prefill's."""
    prompt, _ = render_prompt("Write a long essay about the history of Rome. " * 4)
    block_size = make_engine().config.block_size
    prompt = prompt[: 4 * block_size + 3]
    cut = 2 * block_size + 5
    other = prompt[:cut] + prompt[cut + 1 :]
    params = SamplingParams.of(temperature=0.0, max_output_tokens=1, top_logprobs=TOP_LOGPROBS)
    fresh_engine = make_engine()
    fresh_engine.add_request("other", other, params)
    fresh = run_to_completion(fresh_engine)["other"]
    engine = make_engine(num_kv_blocks=5)
    engine.add_request("first", prompt, params)
    run_to_completion(engine)
    engine.add_request("other", other, params)
    lent = run_to_completion(engine)["other"]
    assert lent.final.num_cached_tokens == cut
    assert logprobs_by_position(lent) == logprobs_by_position(fresh)
