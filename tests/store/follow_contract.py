"""Contract: a reader follows a response's SSE events as they are appended."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.waits import until
from store.base import Store
from tests.store.contract_base import ContractBase
from tests.store.projection import new_response_id, project, response_log, steps


async def collect(store: Store, response_id: str, after: int = -1) -> list[dict[str, Any]]:
    return [event async for event in store.follow_sse(response_id, after, idle_timeout_s=20)]


class FollowContract(ContractBase):
    async def test_a_follower_sees_every_event_live_and_stops_at_the_end(
        self, store: Store, other_store: Store
    ) -> None:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        # The follower starts before the response exists, on another connection.
        follower = asyncio.create_task(collect(other_store, response_id))
        assert await until(lambda: self.followed(other_store) == 1, timeout=20)
        for step in log_steps:
            await step.append_to(store)
            await asyncio.sleep(0.01)  # the events come one at a time, as a worker's do
        events = await asyncio.wait_for(follower, timeout=20)
        assert events == await store.sse_events(response_id)
        assert events[-1]["type"] == "response.completed"

    async def test_a_follower_resumes_after_a_position(self, store: Store) -> None:
        response_id = new_response_id()
        log = response_log(response_id)
        state = await project(store, log[:4])
        follower = asyncio.create_task(collect(store, response_id, after=2))
        assert await until(lambda: self.followed(store) == 1, timeout=20)
        for step in steps(log)[4:]:
            await step.append_to(store)
        events = await asyncio.wait_for(follower, timeout=20)
        numbers = [event["sequence_number"] for event in events]
        assert numbers[0] == 3 and numbers == list(range(3, 3 + len(numbers)))
        assert events[: len(state.sse_events) - 3] == state.sse_events[3:]

    async def test_a_finished_response_replays_and_ends(self, store: Store) -> None:
        response_id = new_response_id()
        state = await project(store, response_log(response_id))
        assert await asyncio.wait_for(collect(store, response_id), 20) == state.sse_events

    async def test_a_quiet_response_times_out(self, store: Store) -> None:
        response_id = new_response_id()
        await project(store, response_log(response_id)[:2])
        seen = []
        with pytest.raises(TimeoutError):
            async for event in store.follow_sse(response_id, idle_timeout_s=0.3):
                seen.append(event)
        assert [event["type"] for event in seen] == ["response.created", "response.in_progress"]
