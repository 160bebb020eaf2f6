"""A response that runs to the end of the model's context because no max_output_tokens was
set says so: in its incomplete_details (a reason the official SDK accepts strictly, and a
message) and in one line of the worker's log. A worker with a short context
(SPATE_MAX_MODEL_LEN) beside the session's, under a name of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for

CONTEXT = 96
NAME = "smol-short-context"


@pytest.fixture(scope="module")
def short_context(stack: Stack) -> Iterator[SpateProcess]:
    worker = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "short-context-worker",
         "SPATE_MAX_MODEL_LEN": str(CONTEXT), "SPATE_LOG_FORMAT": "json"},
        "short-context-worker",
    )
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused")
    try:
        def served() -> bool:
            if not worker.alive():
                raise RuntimeError(f"the worker exited:\n{worker.output()[-4000:]}")
            return any(model.id == NAME for model in client.models.list())

        assert wait_for(served, timeout=MODEL_LOAD_TIMEOUT, interval=0.5)
        yield worker
    finally:
        worker.stop()


def test_a_response_cut_by_the_context_says_so(stack: Stack, short_context: SpateProcess) -> None:
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                    _strict_response_validation=True)
    # ignore_eos: the model may not end sooner, so the context is what ends it.
    response = client.responses.create(model=NAME, input="Count to a thousand.",
                                       temperature=0, extra_body={"ignore_eos": True})
    assert response.status == "incomplete"
    details = response.incomplete_details
    assert details is not None and details.reason == "max_output_tokens"
    usage = response.usage
    assert usage is not None and usage.total_tokens == CONTEXT
    message = (details.model_extra or {})["message"]
    assert message.startswith(f"The response reached the end of the model's context: {CONTEXT} tokens")
    assert "no max_output_tokens was set" in message

    def logged() -> list[str]:
        lines = [json.loads(line) for line in short_context.output().splitlines()
                 if line.startswith("{")]
        return [line["message"] for line in lines if line.get("response_id") == response.id
                and "end of the model's context" in line["message"]]

    assert wait_for(lambda: len(logged()) == 1, timeout=30)
    assert message in logged()[0]

    # With max_output_tokens as the limit, the details stay as they were.
    capped = client.responses.create(model=NAME, input="Count to a thousand.", temperature=0,
                                     max_output_tokens=8, extra_body={"ignore_eos": True})
    assert capped.incomplete_details is not None
    assert capped.incomplete_details.model_dump(exclude_none=True) == {"reason": "max_output_tokens"}
