"""An unexpected error in one request's token processing fails that request alone: its
blocks are freed and the rest of its batch goes on with the tokens it would have had."""

from __future__ import annotations

from tests.engine.conftest import run_to_completion
from workers.engine import SamplingParams


def test_one_request_failing_leaves_its_batch_running(make_engine, render_prompt) -> None:
    prompt, _ = render_prompt("What is the capital of France?")
    params = SamplingParams(temperature=0.0, max_output_tokens=12, ignore_eos=True)
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
