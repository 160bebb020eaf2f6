"""A grammar past the worker's compile budget, through the API: the request ends with a
400 naming its field and saying what to do, and the worker goes on serving (its compiler
was stopped at the budget, off the engine's path)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for

NAME = "grammar-budget-smollm"


@pytest.fixture(scope="module")
def budget_worker(stack: Stack) -> Iterator[SpateProcess]:
    # A budget no grammar of this size compiles within, on any machine.
    process = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": "grammar-budget",
         "SPATE_GRAMMAR_TIMEOUT_S": "0.05"},
        "grammar-budget",
    )
    try:
        assert wait_for(lambda: "ready: serving" in process.output() or not process.alive(),
                        MODEL_LOAD_TIMEOUT, 0.5), process.output()[-3000:]
        assert process.alive(), process.output()[-3000:]
        yield process
    finally:
        process.stop()


def test_a_grammar_past_its_budget_is_a_400_and_the_worker_goes_on(
    stack: Stack, budget_worker: SpateProcess
) -> None:
    # As many and as long choices as the limits table allows.
    choices = [f"choice {n}: " + "word " * 200 for n in range(256)]
    reply = httpx.post(f"{stack.base_url}/v1/responses", timeout=300, json={
        "model": NAME, "input": "Pick one.", "structured_outputs": {"choice": choices},
    })
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "structured_outputs.choice", error
    assert "make it smaller or simpler" in error["message"], error
    # The same worker answers the next request at once.
    after = httpx.post(f"{stack.base_url}/v1/responses", timeout=300, json={
        "model": NAME, "input": "Say hi.", "max_output_tokens": 4,
    })
    assert after.status_code == 200, after.text
    assert after.json()["status"] in ("completed", "incomplete")
    assert budget_worker.alive()
