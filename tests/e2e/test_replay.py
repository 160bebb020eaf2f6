"""Folding a stored log gives exactly the SSE bytes the live stream gave: ids, event names
and data, for reasoning, a thinking budget cutoff and function calls (a worker crash
mid-stream: tests/e2e/test_worker_crash.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.replay import live_sse, replayed_sse, response_id_of
from tests.e2e.test_tools import WEATHER_TOOL

BASE = {"model": DEFAULT_MODEL, "temperature": 0, "max_output_tokens": 24}
CASES: dict[str, dict[str, Any]] = {
    "reasoning": {"input": "Is 7 a prime number?", "reasoning": {"effort": "medium"}},
    "budget_cutoff": {"input": "Count to twenty.", "reasoning": {"effort": "medium"},
                      "thinking_token_budget": 3},
    "tool_call": {"input": "What is the weather in Paris?", "tools": [WEATHER_TOOL],
                  "tool_choice": "required", "max_output_tokens": 40},
}
MUST_HOLD = {
    "reasoning": b"event: response.reasoning_text.delta",
    "budget_cutoff": b"event: response.output_text.delta",
    "tool_call": b"event: response.function_call_arguments.done",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_stored_log_replays_to_the_live_bytes(stack: Stack, case: str) -> None:
    live = live_sse(stack.base_url, {**BASE, **CASES[case]})
    assert MUST_HOLD[case] in live, live[-2000:]
    assert b"event: response.completed" in live or b"event: response.incomplete" in live
    replayed = await replayed_sse(stack.nats_url, response_id_of(live))
    assert replayed == live
