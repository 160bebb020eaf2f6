"""Each served family thinks through the public API: a worker per family serves a tiny
checkpoint with a real template and think markers (tests/workers/model/thinking_checkpoints.py),
and a streamed Responses request with a thinking budget, read by the official SDK with
strict validation, gets a reasoning item of exactly the budget's tokens, the family's own
end marker forced after them, then the answer in a message item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for
from tests.workers.model.thinking_checkpoints import (
    QUESTION,
    THINKING_FAMILIES,
    ThinkingPath,
    write_thinking_checkpoint,
)

BUDGET = 5  # under the thinking cycle's 7 words, so the cut shows
# Enough blocks for the longest prompt (SmolLM3's system prompt, about 1,050 tokens):
# a worker would otherwise size its cache from the machine's free memory.
KV_BLOCKS = "128"
# Each item: added, its part added, deltas, text done, part done, item done.
REASONING_EVENTS = ["response.output_item.added", "response.content_part.added",
                    "response.reasoning_text.delta", "response.reasoning_text.done",
                    "response.content_part.done", "response.output_item.done"]
MESSAGE_EVENTS = ["response.output_item.added", "response.content_part.added",
                  "response.output_text.delta", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done"]
WAVES = [list(THINKING_FAMILIES)[:4], list(THINKING_FAMILIES)[4:]]
CASES = [pytest.param(index, family, id=family)
         for index, families in enumerate(WAVES) for family in families]


def served_name(family: str) -> str:
    return f"thinking-{family}"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, ThinkingPath]]:
    """Each family's folder and the path its greedy decoding walks."""
    pytest.importorskip("transformers")
    built = {}
    for family, spec in THINKING_FAMILIES.items():
        directory = Path(tmp_path_factory.mktemp(f"thinking-{family}"))
        built[family] = (directory, write_thinking_checkpoint(directory, spec))
    return built


@pytest.fixture(scope="module")
def wave(
    request: pytest.FixtureRequest, api_server: Stack,
    checkpoints: dict[str, tuple[Path, ThinkingPath]],
) -> Iterator[dict[str, ThinkingPath]]:
    """A worker for each family of one wave, started together (a worker holds about half a
    gigabyte: two waves keep the test within a CI runner's memory)."""
    families = WAVES[request.param]
    workers = [
        SpateProcess(
            ["worker", "--model", str(checkpoints[family][0]),
             "--served-model-name", served_name(family), "--max-num-seqs", "2"],
            {"SPATE_NATS_URL": api_server.nats_url, "SPATE_WORKER_ID": served_name(family),
             "SPATE_NUM_KV_BLOCKS": KV_BLOCKS},
            served_name(family),
        )
        for family in families
    ]
    try:
        names = {served_name(family) for family in families}

        def listed() -> set[str]:
            reply = httpx.get(f"{api_server.base_url}/v1/models", timeout=5).json()
            return {model["id"] for model in reply["data"]}

        ready = wait_for(lambda: names <= listed() or not all(w.alive() for w in workers),
                         MODEL_LOAD_TIMEOUT, 0.5)
        assert ready and all(w.alive() for w in workers), "\n".join(
            f"{w.name}:\n{w.output()[-1500:]}" for w in workers if not w.alive())
        yield {family: checkpoints[family][1] for family in families}
    finally:
        for worker in workers:
            worker.stop()


def _collapsed(types: list[str]) -> list[str]:
    """Event types with each run of deltas kept once."""
    return [kind for i, kind in enumerate(types) if i == 0 or kind != types[i - 1]
            or not kind.endswith(".delta")]


@pytest.mark.parametrize(("wave", "family"), CASES, indirect=["wave"])
def test_a_streamed_response_thinks_within_its_budget(
    api_server: Stack, wave: dict[str, ThinkingPath], family: str
) -> None:
    path = wave[family]
    client = openai.OpenAI(base_url=f"{api_server.base_url}/v1", api_key="unused",
                           _strict_response_validation=True)
    stream = client.responses.create(
        model=served_name(family), input=QUESTION, stream=True, temperature=0,
        max_output_tokens=32, reasoning={"effort": "low"},
        extra_body={"thinking_token_budget": BUDGET, "enable_response_messages": True},
    )
    events = list(stream)
    types = [event.type for event in events]
    assert _collapsed(types) == ["response.created", "response.in_progress",
                                 *REASONING_EVENTS, *MESSAGE_EVENTS, "response.completed"], _collapsed(types)
    assert [event.sequence_number for event in events] == list(range(len(events)))

    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed"
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == BUDGET
    raw = final.model_dump()
    (prompt,) = raw["input_messages"]
    (output,) = raw["output_messages"]
    # The worker rendered the prompt the checkpoint was designed for, and decoding walked
    # the designed path: BUDGET thinking tokens, the family's end marker, the answer.
    assert prompt["tokens"][-1] == path.prompt_last
    assert output["tokens"] == path.output(BUDGET)
    assert final.usage.output_tokens == len(path.output(BUDGET))

    reasoning, message = final.output
    assert reasoning.type == "reasoning" and message.type == "message"
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")  # type: ignore[union-attr]
    assert reasoning.content is not None and reasoning.content[0].text == thought
    assert thought == path.reasoning_text(BUDGET)
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert message.content[0].text == answer == path.answer_text()  # type: ignore[union-attr]
