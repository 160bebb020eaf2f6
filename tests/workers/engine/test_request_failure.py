"""An unexpected error in one request's token processing fails that request alone: its
blocks are freed and the rest of its batch goes on with the tokens it would have had."""

from __future__ import annotations

import pytest

from tests.workers.engine.conftest import plain_decoding, run_to_completion
from workers.engine import SamplingParams


def test_one_request_failing_leaves_its_batch_running(make_engine, render_prompt) -> None:
    prompt, _ = render_prompt("What is the capital of France?")
    params = SamplingParams.of(temperature=0.0, max_output_tokens=12, ignore_eos=True)
    alone = make_engine()
    alone.add_request("good", prompt, params)
    expected = run_to_completion(alone)["good"]

    engine = make_engine()
    free_blocks = engine.scheduler.block_manager.num_free_blocks
    engine.add_request("good", prompt, params)
    engine.add_request("bad", prompt, params)
    process_token = engine.output_processor.process_token
    steps = {"bad": 0}

    def failing_on_bad(seq, *args):  # type: ignore[no-untyped-def]
        if seq.request_id == "bad":
            steps["bad"] += 1
            if steps["bad"] == 3:
                raise RuntimeError("a bug in one sequence")
        return process_token(seq, *args)

    engine.output_processor.process_token = failing_on_bad
    generations = run_to_completion(engine)
    bad = generations["bad"].outputs[-1]
    assert bad.finished and bad.finish_reason == "error"
    assert bad.error == "RuntimeError: a bug in one sequence"
    good = generations["good"]
    assert good.outputs[-1].finish_reason == "length"
    assert good.token_ids == expected.token_ids
    assert engine.scheduler.block_manager.num_free_blocks == free_blocks


def test_a_forward_pass_failing_for_one_sequence_fails_it_alone(make_engine, render_prompt) -> None:
    """A step that raises is run again sequence by sequence: the one whose forward pass
    fails alone fails (finish_reason "error"), the others go on with the very tokens they
    would have had, and no block is leaked."""
    prompt, _ = render_prompt("What is the capital of France?")
    other, _ = render_prompt("Name three colours.")
    params = SamplingParams.of(temperature=0.0, max_output_tokens=10, ignore_eos=True)
    expected = {}
    for name, ids in (("good", prompt), ("also good", other)):
        alone = make_engine()
        alone.add_request(name, ids, params)
        expected[name] = run_to_completion(alone)[name].token_ids

    # The fault is injected into plain decode steps.
    engine = make_engine(speculation=plain_decoding())
    free_blocks = engine.scheduler.block_manager.num_free_blocks
    for name, ids in (("good", prompt), ("bad", prompt), ("also good", other)):
        engine.add_request(name, ids, params)
    run = engine.model_runner.run
    decode_steps_with_bad = {"count": 0}

    def failing_with_bad(seqs, is_prefill, forced):  # type: ignore[no-untyped-def]
        # Fault injection: any forward pass that holds "bad", from its third decode step on.
        if not is_prefill and any(seq.request_id == "bad" for seq in seqs):
            decode_steps_with_bad["count"] += 1
            if decode_steps_with_bad["count"] >= 3:
                raise RuntimeError("forward pass failed")
        return run(seqs, is_prefill, forced)

    engine.model_runner.run = failing_with_bad
    generations = run_to_completion(engine)
    bad = generations["bad"].outputs[-1]
    assert bad.finished and bad.finish_reason == "error"
    assert bad.error == "RuntimeError: forward pass failed"
    for name in ("good", "also good"):
        assert generations[name].outputs[-1].finish_reason == "length"
        assert generations[name].token_ids == expected[name], name
    assert engine.scheduler.block_manager.num_free_blocks == free_blocks


def test_a_step_failing_for_every_sequence_alone_raises(make_engine, render_prompt) -> None:
    """Not one sequence's fault (every one fails alone too): the step raises, and the
    worker's loop hands every request back to the queue."""
    prompt, _ = render_prompt("What is the capital of France?")
    params = SamplingParams.of(temperature=0.0, max_output_tokens=10, ignore_eos=True)
    engine = make_engine()
    engine.add_request("a", prompt, params)
    engine.add_request("b", prompt, params)
    engine.step()  # prefill

    def always_failing(seqs, is_prefill, forced):  # type: ignore[no-untyped-def]
        raise RuntimeError("the device is gone")

    engine.model_runner.run = always_failing
    with pytest.raises(RuntimeError, match="the device is gone"):
        engine.step()


def test_a_failed_prefill_leaves_no_block_to_be_found(make_engine, render_prompt) -> None:
    """The keys and values a failed step was to compute are garbage: when the request
    comes back, its prompt is computed again rather than found in the cache."""
    prompt, _ = render_prompt("Write a long essay about the history of Rome. " * 4)
    params = SamplingParams.of(temperature=0.0, max_output_tokens=4, ignore_eos=True)
    alone = make_engine()
    alone.add_request("again", prompt, params)
    expected = run_to_completion(alone)["again"].token_ids

    engine = make_engine()
    engine.add_request("failing", prompt, params)
    run = engine.model_runner.run

    def failing_after_writing(seqs, is_prefill, forced):  # type: ignore[no-untyped-def]
        run(seqs, is_prefill, forced)  # the cache is written, then the step fails
        raise RuntimeError("the device is gone")

    engine.model_runner.run = failing_after_writing
    with pytest.raises(RuntimeError, match="the device is gone"):
        engine.step()
    engine.cancel("failing")
    engine.model_runner.run = run
    engine.add_request("again", prompt, params)
    again = run_to_completion(engine)["again"]
    assert again.final.num_cached_tokens == 0
    assert again.token_ids == expected
