"""LLMEngine end to end on the real default model: generation, batching invariance, seeds,
stop conditions, cancellation and resuming a response."""

from __future__ import annotations

import pytest

from tests.workers.engine.conftest import plain_decoding, run_to_completion
from workers.engine import SamplingParams

QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Explain what a noun is.",
    "Give me a fun fact about cats.",
    "What is 12 times 12?",
    "Describe a sunset in one sentence.",
)


def greedy(max_tokens: int, **overrides) -> SamplingParams:
    return SamplingParams.of(temperature=0.0, max_output_tokens=max_tokens, **overrides)


def generate_alone(make_engine, prompt, params):
    engine = make_engine()
    engine.add_request("alone", prompt, params)
    return run_to_completion(engine)["alone"]


def test_greedy_answer_names_paris(make_engine, render_prompt):
    prompt, _ = render_prompt("What is the capital of France?")
    generation = generate_alone(make_engine, prompt, greedy(32))
    assert "Paris" in generation.text()
    assert generation.final.finished and generation.final.finish_reason == "stop"
    assert generation.final.num_prompt_tokens == len(prompt)
    assert generation.final.num_output_tokens == len(generation.token_ids)


def test_the_served_precision_still_names_paris(make_engine, render_prompt, served_model):
    """Where the linears compute in bf16 everything between them stays fp32: this prompt's
    first token nearly ties in the fp32 reference ("The" leads "L" by 0.08), and in bf16
    throughout the rounding of the activations can answer "L'Étoile, la Marseillaise"."""
    engine = make_engine(served_model)
    prompt, _ = render_prompt("What is the capital of France?")
    engine.add_request("served", prompt, greedy(12))
    assert "Paris" in run_to_completion(engine)["served"].text()


def test_quantized_model_still_names_paris(make_engine, render_prompt, quantized_model):
    engine = make_engine(quantized_model)
    prompt, _ = render_prompt("What is the capital of France?")
    engine.add_request("quantized", prompt, greedy(12))
    assert "Paris" in run_to_completion(engine)["quantized"].text()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "served", "quantized"])
def test_concurrent_greedy_requests_match_each_run_alone(
    dtype, make_engine, render_prompt, loaded_model, bf16_model, served_model, quantized_model
):
    models = {
        "float32": loaded_model,
        "bfloat16": bf16_model,
        "served": served_model,
        "quantized": quantized_model,
    }
    model = models[dtype]
    prompts = [render_prompt(question)[0] for question in QUESTIONS]
    params = greedy(20)
    alone = [
        generate_alone(lambda: make_engine(model), prompt, params).token_ids for prompt in prompts
    ]
    engine = make_engine(model)
    for index, prompt in enumerate(prompts):
        engine.add_request(f"r{index}", prompt, params)
    together = run_to_completion(engine)
    for index in range(len(prompts)):
        assert together[f"r{index}"].token_ids == alone[index], QUESTIONS[index]


def test_wide_decode_steps_take_every_core_where_the_bits_allow(
    make_engine, render_prompt, quantized_model, served_model
):
    """Quantized linears on the fused ops give a row the same bits at any thread count,
    so a decode step of 4 or more sequences runs on every core while one sequence alone
    keeps the decode threads: a sequence's tokens still do not depend on its batch."""
    from workers.model import DEFAULT_MODEL, load_model
    from workers.model.host import usable_cpu_count

    cores = usable_cpu_count()
    engine = make_engine(quantized_model, num_threads=1)
    runner = engine.model_runner
    if not runner.thread_invariant:
        pytest.skip("the fused CPU ops did not build here")
    assert runner.threads_for(is_prefill=False, rows=1) == 1
    assert runner.threads_for(is_prefill=False, rows=3) == 1
    assert runner.threads_for(is_prefill=False, rows=4) == cores
    # A prefill counts the tokens it computes: one or two past a cached prefix are a
    # decode step's work.
    assert runner.threads_for(is_prefill=True, rows=1) == 1
    assert runner.threads_for(is_prefill=True, rows=40) == cores
    dense = make_engine(served_model, num_threads=1).model_runner
    assert not dense.thread_invariant
    assert dense.threads_for(is_prefill=False, rows=32) == 1
    assert dense.threads_for(is_prefill=True, rows=1) == cores
    # Quantized linears on torch's kernels, under the fused ops: not thread-invariant.
    mixed = make_engine(load_model(DEFAULT_MODEL, backend="torch", weights="quantized"),
                        num_threads=1).model_runner
    assert mixed.ops.backend == "cpu" and not mixed.thread_invariant

    prompts = [render_prompt(question)[0] for question in QUESTIONS[:4]]
    params = greedy(12)
    alone = [
        generate_alone(lambda: make_engine(quantized_model, num_threads=1), prompt, params)
        .token_ids
        for prompt in prompts
    ]
    for index, prompt in enumerate(prompts):
        engine.add_request(f"r{index}", prompt, params)
    together = run_to_completion(engine)
    assert [together[f"r{index}"].token_ids for index in range(4)] == alone


def test_seeded_sampling_is_the_same_alone_and_in_a_busy_batch(make_engine, render_prompt):
    prompt, _ = render_prompt("Tell me a story about a dragon.")
    seeded = SamplingParams.of(temperature=0.9, top_p=0.95, seed=1234, max_output_tokens=24, ignore_eos=True)
    alone = generate_alone(make_engine, prompt, seeded).token_ids
    engine = make_engine()
    for index, question in enumerate(QUESTIONS[:4]):
        engine.add_request(
            f"unseeded{index}", render_prompt(question)[0], SamplingParams.of(max_output_tokens=30)
        )
        engine.add_request(f"greedy{index}", render_prompt(question)[0], greedy(10))
    engine.step()  # the seeded one joins a batch that is already decoding
    engine.add_request("seeded", prompt, seeded)
    together = run_to_completion(engine)
    assert together["seeded"].token_ids == alone
    other_seed = SamplingParams.of(
        temperature=0.9, top_p=0.95, seed=99, max_output_tokens=24, ignore_eos=True
    )
    assert generate_alone(make_engine, prompt, other_seed).token_ids != alone


def test_max_tokens_finishes_with_length(make_engine, render_prompt):
    prompt, _ = render_prompt("Write a long essay about the history of Rome.")
    generation = generate_alone(make_engine, prompt, greedy(7))
    assert len(generation.token_ids) == 7
    assert [output.finished for output in generation.outputs] == [False] * 6 + [True]
    assert generation.final.finish_reason == "length"


def test_stop_string_spanning_tokens_ends_output_and_is_removed(
    make_engine, render_prompt, loaded_model
):
    prompt, _ = render_prompt("What is the capital of France?")
    reference = generate_alone(make_engine, prompt, greedy(32))
    text = reference.text()
    tokenizer = loaded_model.tokenizer
    # A stop string that starts inside one token and ends inside the next.
    pieces = [tokenizer.decode([token_id]) for token_id in reference.token_ids]
    boundary = len(pieces[0]) + len(pieces[1])
    stop = text[boundary - 2 : boundary + 2]
    assert len(stop) == 4 and text.find(stop) == boundary - 2
    stopped = generate_alone(make_engine, prompt, greedy(32, stop=[stop]))
    assert stopped.text() == text[: boundary - 2]
    assert stopped.final.finish_reason == "stop"
    included = generate_alone(
        make_engine, prompt, greedy(32, stop=[stop], include_stop_str_in_output=True)
    )
    assert included.text() == text[: boundary + 2]


def test_text_that_only_looks_like_a_stop_string_is_released(make_engine, render_prompt):
    prompt, _ = render_prompt("What is the capital of France?")
    reference = generate_alone(make_engine, prompt, greedy(32))
    text = reference.text()
    # The first characters of the answer begin this stop string, which never completes.
    stop = text[:3] + "\x00never"
    held = generate_alone(make_engine, prompt, greedy(32, stop=[stop]))
    assert held.text() == text
    assert held.token_ids == reference.token_ids


def test_stop_token_ids_and_ignore_eos(make_engine, render_prompt, loaded_model):
    prompt, _ = render_prompt("What is the capital of France?")
    reference = generate_alone(make_engine, prompt, greedy(32))
    stop_token = reference.token_ids[3]
    stopped = generate_alone(make_engine, prompt, greedy(32, stop_token_ids=[stop_token]))
    assert stopped.token_ids == reference.token_ids[:4]
    assert stopped.final.finish_reason == "stop"
    eos = loaded_model.tokenizer.eos_token_ids[0]
    assert reference.token_ids[-1] == eos
    ignoring = generate_alone(
        make_engine, prompt, greedy(len(reference.token_ids) + 3, ignore_eos=True)
    )
    assert ignoring.token_ids[: len(reference.token_ids)] == reference.token_ids
    assert ignoring.final.finish_reason == "length"


def test_cancel_stops_the_request_within_one_step_and_frees_its_blocks(make_engine, render_prompt):
    engine = make_engine()
    free_before = engine.block_manager.num_free_blocks
    prompt, _ = render_prompt("Write a long essay about the history of Rome.")
    engine.add_request("doomed", prompt, greedy(200))
    engine.add_request("survivor", render_prompt("Name three primary colors.")[0], greedy(5))
    for _ in range(3):
        engine.step()
    assert engine.block_manager.num_free_blocks < free_before
    assert engine.cancel("doomed")
    assert not engine.cancel("doomed")
    outputs = engine.step()
    cancelled = [output for output in outputs if output.request_id == "doomed"]
    assert len(cancelled) == 1
    assert cancelled[0].finished and cancelled[0].finish_reason == "cancelled"
    assert not cancelled[0].new_token_ids
    rest = run_to_completion(engine)
    assert "doomed" not in rest
    assert engine.block_manager.num_free_blocks == free_before


def test_cancel_of_a_waiting_request_reports_it_on_the_next_step(make_engine, render_prompt):
    engine = make_engine()
    engine.add_request("queued", render_prompt("Name three primary colors.")[0], greedy(5))
    assert engine.cancel("queued")
    assert engine.has_unfinished_requests()
    outputs = engine.step()
    assert [(output.request_id, output.finish_reason) for output in outputs] == [
        ("queued", "cancelled")
    ]
    assert not engine.has_unfinished_requests()


def test_resumed_request_continues_exactly_like_the_uninterrupted_run(make_engine, render_prompt):
    prompt, _ = render_prompt("Write a long essay about the history of Rome.")
    params = greedy(40, ignore_eos=True)
    full = generate_alone(lambda: make_engine(speculation=plain_decoding()), prompt, params)
    assert len(full.token_ids) == 40
    emitted_before = 17
    resumed_engine = make_engine()
    resumed_engine.add_request(
        "resumed", prompt, params, output_token_ids=full.token_ids[:emitted_before]
    )
    resumed = run_to_completion(resumed_engine)["resumed"]
    assert resumed.token_ids == full.token_ids[emitted_before:]
    assert resumed.final.num_output_tokens == 40
    # What the first engine streamed plus what the second one streams is the whole text:
    # nothing lost, nothing repeated.
    streamed_before = "".join(
        delta.text for output in full.outputs[:emitted_before] for delta in output.deltas
    )
    assert streamed_before + resumed.text() == full.text()


def test_resumed_seeded_request_continues_its_random_stream(make_engine, render_prompt):
    prompt, _ = render_prompt("Tell me a story about a dragon.")
    params = SamplingParams.of(temperature=1.0, seed=7, max_output_tokens=20, ignore_eos=True)
    full = generate_alone(make_engine, prompt, params).token_ids
    engine = make_engine()
    engine.add_request("resumed", prompt, params, output_token_ids=full[:8])
    assert run_to_completion(engine)["resumed"].token_ids == full[8:]


def test_shared_prompt_prefix_is_served_from_the_cache(make_engine, render_prompt):
    engine = make_engine()
    prompt, _ = render_prompt("Write a long essay about the history of Rome. " * 4)
    # Enough output that the block holding the prompt's end fills and is cached too.
    params = greedy(2 * engine.config.block_size, ignore_eos=True)
    engine.add_request("first", prompt, params)
    first = run_to_completion(engine)["first"]
    engine.add_request("second", prompt, params)
    second = run_to_completion(engine)["second"]
    assert first.final.num_cached_tokens == 0
    # Every prompt token but the last, whose logits give the first output token.
    assert second.final.num_cached_tokens == len(prompt) - 1
    assert second.token_ids == first.token_ids
    engine.add_request("salted", prompt, greedy(4, cache_salt="tenant-b"))
    assert run_to_completion(engine)["salted"].final.num_cached_tokens == 0


def test_preempted_sequences_finish_with_the_same_tokens(make_engine, render_prompt):
    prompts = [render_prompt(question)[0] for question in QUESTIONS[:3]]
    params = greedy(20, ignore_eos=True)
    roomy = make_engine()
    for index, prompt in enumerate(prompts):
        roomy.add_request(f"r{index}", prompt, params)
    expected = run_to_completion(roomy)
    # Too few blocks for all three to finish side by side: some are preempted and recomputed.
    blocks_for_longest = -(-(max(len(prompt) for prompt in prompts) + 20) // 16)
    tight = make_engine(num_kv_blocks=blocks_for_longest + 2)
    for index, prompt in enumerate(prompts):
        tight.add_request(f"r{index}", prompt, params)
    result = run_to_completion(tight)
    assert tight.scheduler.num_preemptions > 0
    for index in range(len(prompts)):
        assert result[f"r{index}"].token_ids == expected[f"r{index}"].token_ids


def test_logprobs_report_the_sampled_token_and_alternatives(make_engine, render_prompt):
    prompt, _ = render_prompt("What is the capital of France?")
    generation = generate_alone(make_engine, prompt, greedy(5, top_logprobs=3))
    logprobs = [
        entry
        for output in generation.outputs
        for delta in output.deltas
        for entry in delta.logprobs
    ]
    assert logprobs
    for entry in logprobs:
        assert len(entry.top_logprobs) == 3
        # Greedy picks the most likely token, so it heads its own alternatives.
        assert entry.top_logprobs[0][0] == entry.token_id
        assert entry.logprob == pytest.approx(entry.top_logprobs[0][1])
        assert entry.logprob <= 0.0


def test_invalid_requests_are_rejected(make_engine, render_prompt):
    engine = make_engine()
    prompt, _ = render_prompt("Hi")
    with pytest.raises(ValueError):
        engine.add_request("empty", [], greedy(4))
    with pytest.raises(ValueError):
        engine.add_request("outside", [engine.vocab_size], greedy(4))
    with pytest.raises(ValueError):
        engine.add_request("too-long", [1] * engine.max_model_len, greedy(4))
    engine.add_request("twice", prompt, greedy(4))
    with pytest.raises(ValueError):
        engine.add_request("twice", prompt, greedy(4))


def test_prefill_uses_every_core_and_decode_the_configured_threads(make_engine, render_prompt):
    import torch

    from workers.model.host import usable_cpu_count

    before = torch.get_num_threads()
    try:
        engine = make_engine(num_threads=1)
        engine.add_request("threads", render_prompt("Hi")[0], greedy(3))
        engine.step()  # the prefill
        assert torch.get_num_threads() == usable_cpu_count()
        engine.step()  # a decode step
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
