"""Contract: projected responses. Appends are idempotent by (response id, seq), reads give
back what the fold produced, and a deleted response stays deleted."""

from __future__ import annotations

import asyncio

import pytest

from events import fold
from store.base import Store
from store.errors import SeqGap, StoreError
from tests.store.contract_base import ContractBase
from tests.store.projection import (
    input_items_of,
    new_response_id,
    project,
    response_log,
    steps,
)


class ResponseContract(ContractBase):
    async def test_a_projected_log_reads_back_as_the_fold_made_it(self, store: Store) -> None:
        response_id = new_response_id()
        log = response_log(response_id)
        state = await project(store, log, owner="key-1")
        stored = await store.get_response(response_id)
        assert stored is not None
        assert stored.response == state.response()
        assert (stored.status, stored.owner, stored.next_seq) == ("completed", "key-1", len(log))
        assert stored.cancelled is False
        assert await store.next_seq(response_id) == len(log)
        assert await store.sse_events(response_id) == state.sse_events

    async def test_reads_after_a_position(self, store: Store) -> None:
        response_id = new_response_id()
        log = response_log(response_id)
        state = await project(store, log)
        assert await store.sse_events(response_id, after=4) == state.sse_events[5:]
        assert await store.sse_events(response_id, after=len(state.sse_events) - 1) == []

    async def test_a_run_of_events_is_one_append(self, store: Store) -> None:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        await log_steps[0].append_to(store)
        run = log_steps[1:4]
        sse = [event for step in run for event in step.sse_events]
        append = {"sse_events": sse, "status": run[-1].status, "events": len(run)}
        assert await store.append(response_id, 1, **append) is True
        assert await store.next_seq(response_id) == 4
        assert await store.append(response_id, 1, **append) is False  # redelivered whole
        # A run that overlaps the applied events is refused whole, as a gap is.
        overlap = log_steps[3:5]
        with pytest.raises(SeqGap) as refused:
            await store.append(response_id, 3, events=2, status=overlap[-1].status,
                               sse_events=[e for step in overlap for e in step.sse_events])
        assert refused.value.expected == 4
        for step in log_steps[4:]:
            await step.append_to(store)
        state = fold([step.event for step in log_steps])
        assert await store.sse_events(response_id) == state.sse_events

    async def test_an_ended_response_reads_back_the_same_sealed(self, store: Store) -> None:
        # An ended response may keep its snapshot and SSE events packed: every read is
        # unchanged.
        response_id = new_response_id()
        log = response_log(response_id, answer=tuple(f" word{index}" for index in range(40)))
        state = await project(store, log)
        for after in (-1, 0, 7, len(state.sse_events) - 2, len(state.sse_events) - 1):
            assert await store.sse_events(response_id, after=after) == state.sse_events[after + 1:]
        followed = [event async for event in store.follow_sse(response_id, after=3)]
        assert followed == state.sse_events[4:]
        stored = await store.get_response(response_id)
        assert stored is not None
        assert (stored.response, stored.status, stored.next_seq) == (
            state.response(), "completed", len(log))
        assert await store.delete_response(response_id) is True
        assert await store.sse_events(response_id) == []

    async def test_a_repeated_or_older_seq_changes_nothing(self, store: Store) -> None:
        response_id = new_response_id()
        first, second, third = steps(response_log(response_id))[:3]
        assert await first.append_to(store) is True
        assert await first.append_to(store) is False
        assert await second.append_to(store) is True
        assert await first.append_to(store) is False
        assert await second.append_to(store) is False
        assert await store.next_seq(response_id) == 2
        assert len(await store.sse_events(response_id)) == len(first.sse_events + second.sse_events)
        assert await third.append_to(store) is True

    async def test_a_gap_is_refused_and_reported(self, store: Store) -> None:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        with pytest.raises(SeqGap) as refused:
            await log_steps[1].append_to(store)
        assert (refused.value.expected, refused.value.got) == (0, 1)
        await log_steps[0].append_to(store)
        before = await store.sse_events(response_id)
        with pytest.raises(SeqGap) as refused:
            await log_steps[3].append_to(store)
        assert (refused.value.expected, refused.value.got) == (1, 3)
        assert await store.next_seq(response_id) == 1
        assert await store.sse_events(response_id) == before

    async def test_racing_appenders_write_each_event_once(
        self, store: Store, other_store: Store
    ) -> None:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        first = log_steps[0]
        applied = await asyncio.gather(first.append_to(store), first.append_to(other_store))
        assert sorted(applied) == [False, True]

        # Two projectors replaying the whole log at once: every event lands once.
        async def replay(target: Store) -> None:
            for step in log_steps[1:]:
                await step.append_to(target)

        await asyncio.gather(replay(store), replay(other_store))
        state = fold([step.event for step in log_steps])
        assert await store.sse_events(response_id) == state.sse_events
        assert await store.next_seq(response_id) == len(log_steps)

    async def test_sse_numbering_must_follow_the_stored_events(self, store: Store) -> None:
        response_id = new_response_id()
        first, second = steps(response_log(response_id))[:2]
        await first.append_to(store)
        renumbered = [{**event, "sequence_number": event["sequence_number"] + 5}
                      for event in second.sse_events]
        with pytest.raises(StoreError):
            await store.append(response_id, 1, sse_events=renumbered,
                               status="in_progress")
        assert await store.next_seq(response_id) == 1
        with pytest.raises(ValueError):
            await store.append(response_id, 1, status="in_progress",
                               sse_events=[second.sse_events[0], second.sse_events[0]])

    async def test_the_first_event_carries_a_snapshot(self, store: Store) -> None:
        with pytest.raises(ValueError):
            await store.append(new_response_id(), 0, sse_events=[],
                               status="queued")

    async def test_an_event_without_a_snapshot_keeps_the_last_one(self, store: Store) -> None:
        response_id = new_response_id()
        first, second = steps(response_log(response_id))[:2]
        await first.append_to(store)
        await store.append(response_id, 1, sse_events=second.sse_events,
                           status="in_progress")
        stored = await store.get_response(response_id)
        assert stored is not None
        assert (stored.response, stored.status) == (first.response, "in_progress")

    async def test_the_owner_is_set_once(self, store: Store) -> None:
        response_id = new_response_id()
        first, second = steps(response_log(response_id))[:2]
        await first.append_to(store, owner="key-1")
        await second.append_to(store, owner="key-2")
        stored = await store.get_response(response_id)
        assert stored is not None and stored.owner == "key-1"
        unowned = new_response_id()
        await project(store, response_log(unowned))
        stored = await store.get_response(unowned)
        assert stored is not None and stored.owner is None

    async def test_input_items_come_with_the_first_event(self, store: Store) -> None:
        response_id = new_response_id()
        items = [*input_items_of(2), {"type": "message", "role": "user", "content": "no id"}]
        await project(store, response_log(response_id), input_items=items)
        page = await store.input_items(response_id, order="asc")
        assert page is not None
        assert page.data[:2] == items[:2]
        assert page.data[2]["id"].startswith("msg_") and page.data[2]["content"] == "no id"

    async def test_an_unknown_response_reads_as_absent(self, store: Store) -> None:
        response_id = new_response_id()
        assert await store.get_response(response_id) is None
        assert await store.next_seq(response_id) == 0
        assert await store.sse_events(response_id) == []
        assert await store.input_items(response_id) is None
        assert await store.is_cancelled(response_id) is False
        assert await store.delete_response(response_id) is False

    async def test_a_deleted_response_stays_deleted(self, store: Store) -> None:
        response_id = new_response_id()
        log = response_log(response_id)
        await project(store, log[:3], input_items=input_items_of(2))
        assert await store.delete_response(response_id) is True
        assert await store.get_response(response_id) is None
        assert await store.sse_events(response_id) == []
        assert await store.input_items(response_id) is None
        assert await store.delete_response(response_id) is False
        # The projector goes on, or replays from the start: nothing comes back.
        for step in steps(log):
            assert await step.append_to(store) is False
        assert await store.get_response(response_id) is None
        assert await store.mark_cancelled(response_id) is False

    async def test_a_cancel_mark_is_set_once_and_stays(self, store: Store) -> None:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        await log_steps[0].append_to(store)
        assert await store.mark_cancelled(response_id) is True
        assert await store.mark_cancelled(response_id) is False
        for step in log_steps[1:]:
            await step.append_to(store)
        stored = await store.get_response(response_id)
        assert stored is not None and stored.cancelled and await store.is_cancelled(response_id)

    async def test_a_cancel_mark_may_precede_the_first_event(self, store: Store) -> None:
        response_id = new_response_id()
        assert await store.mark_cancelled(response_id) is True
        assert await store.get_response(response_id) is None
        await project(store, response_log(response_id))
        stored = await store.get_response(response_id)
        assert stored is not None and stored.cancelled
