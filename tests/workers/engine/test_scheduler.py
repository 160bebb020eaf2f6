"""Scheduler: admission, prefill/decode steps, preemption, priorities and cancellation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from workers.engine.block_manager import BlockManager
from workers.engine.sampling_params import SamplingParams
from workers.engine.scheduler import Scheduler
from workers.engine.sequence import Sequence, SequenceStatus

BLOCK_SIZE = 4


def make_scheduler(num_blocks=16, max_num_seqs=8, max_num_batched_tokens=64):
    return Scheduler(BlockManager(num_blocks, BLOCK_SIZE), max_num_seqs, max_num_batched_tokens)


def make_sequence(request_id, num_tokens, arrival_order, priority=0, first_token=0, owner=None):
    params = SamplingParams.of(priority=priority, owner=owner)
    prompt = list(range(first_token, first_token + num_tokens))
    return Sequence(request_id, arrival_order, prompt, params, max_num_tokens=1000)


def append_one_token(seqs):
    for seq in seqs:
        seq.append_token(1)


def test_new_requests_are_prefilled_then_decoded_together():
    scheduler = make_scheduler()
    first = make_sequence("first", 5, 0)
    scheduler.add(first)
    batch, is_prefill = scheduler.schedule()
    assert is_prefill and batch == [first]
    append_one_token(batch)
    # A request arriving between steps joins with a prefill step of its own, then both
    # decode in one batch.
    second = make_sequence("second", 3, 1, first_token=100)
    scheduler.add(second)
    batch, is_prefill = scheduler.schedule()
    assert is_prefill and batch == [second]
    append_one_token(batch)
    batch, is_prefill = scheduler.schedule()
    assert not is_prefill and batch == [first, second]


def test_prefill_batch_respects_token_and_sequence_limits():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=10)
    seqs = [make_sequence(f"s{index}", 6, index, first_token=index * 100) for index in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    batch, is_prefill = scheduler.schedule()
    assert is_prefill and batch == [seqs[0]]  # 6 + 6 tokens would exceed 10
    batch, _ = scheduler.schedule()
    assert batch == [seqs[1]]
    # max_num_seqs is reached: the third waits and the running pair decodes.
    append_one_token(seqs[:2])
    batch, is_prefill = scheduler.schedule()
    assert not is_prefill and batch == seqs[:2]
    assert scheduler.waiting == [seqs[2]]


def test_latest_arrival_is_preempted_when_blocks_run_out_and_recomputed_later():
    scheduler = make_scheduler(num_blocks=4)
    early = make_sequence("early", 4, 0)
    late = make_sequence("late", 4, 1, first_token=100)
    scheduler.add(early)
    scheduler.add(late)
    batch, _ = scheduler.schedule()
    assert batch == [early, late]
    free_blocks_before = scheduler.block_manager.num_free_blocks
    assert free_blocks_before == 2
    for _ in range(4):
        append_one_token(scheduler.running)
        batch, is_prefill = scheduler.schedule()
        assert not is_prefill
    # Each sequence now needs a third block for its 9th token; there are none left, so the
    # later arrival gives its blocks up and waits.
    append_one_token(batch)
    batch, is_prefill = scheduler.schedule()
    assert batch == [early]
    assert late.status is SequenceStatus.WAITING and late.block_table == []
    assert scheduler.waiting == [late]
    assert scheduler.num_preemptions == 1
    # Once the early one finishes, the late one is prefilled again with its output so far.
    scheduler.finish(early, "stop")
    batch, is_prefill = scheduler.schedule()
    assert is_prefill and batch == [late]
    assert late.num_tokens == 9


def test_lower_priority_value_runs_first_then_arrival_order():
    scheduler = make_scheduler(max_num_seqs=1)
    background = make_sequence("background", 3, 0, priority=5)
    urgent = make_sequence("urgent", 3, 1, priority=-1, first_token=100)
    normal = make_sequence("normal", 3, 2, priority=0, first_token=200)
    for seq in (background, urgent, normal):
        scheduler.add(seq)
    assert [seq.request_id for seq in scheduler.waiting] == ["urgent", "normal", "background"]
    batch, _ = scheduler.schedule()
    assert batch == [urgent]


def test_higher_priority_arrival_preempts_lower_priority_running_sequence():
    scheduler = make_scheduler(num_blocks=2)
    low = make_sequence("low", 8, 0, priority=3)
    scheduler.add(low)
    scheduler.schedule()
    high = make_sequence("high", 5, 1, priority=0, first_token=100)
    scheduler.add(high)
    batch, is_prefill = scheduler.schedule()
    assert is_prefill and batch == [high]
    assert low.status is SequenceStatus.WAITING and low.block_table == []


def test_equal_priority_arrival_waits_instead_of_preempting():
    scheduler = make_scheduler(num_blocks=3)
    first = make_sequence("first", 8, 0)
    scheduler.add(first)
    scheduler.schedule()
    append_one_token([first])
    second = make_sequence("second", 5, 1, first_token=100)
    scheduler.add(second)
    batch, is_prefill = scheduler.schedule()
    assert not is_prefill and batch == [first]
    assert first.status is SequenceStatus.RUNNING
    assert scheduler.waiting == [second]


def test_an_owner_with_many_waiting_gets_no_more_of_the_batch_than_one_with_one():
    scheduler = make_scheduler(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=1000)
    flood = [make_sequence(f"a{index}", 2, index, owner="a", first_token=index * 10)
             for index in range(200)]
    for seq in flood:
        scheduler.add(seq)
    lone = make_sequence("b0", 2, 200, owner="b", first_token=5000)
    scheduler.add(lone)
    batch, is_prefill = scheduler.schedule()
    # b arrived last, yet takes its turn as soon as a has one running.
    assert is_prefill and batch == [flood[0], lone, flood[1], flood[2]]


def test_priority_comes_before_the_owners_share():
    scheduler = make_scheduler(max_num_seqs=1)
    busy = [make_sequence(f"a{index}", 2, index, owner="a", first_token=index * 10)
            for index in range(2)]
    scheduler.add(busy[0])
    scheduler.schedule()
    lazy = make_sequence("b0", 2, 5, owner="b", priority=3, first_token=500)
    scheduler.add(lazy)
    scheduler.add(busy[1])
    scheduler.finish(busy[0], "stop")
    batch, _ = scheduler.schedule()
    assert batch == [busy[1]]


def test_a_full_batch_of_one_owner_makes_room_for_another():
    scheduler = make_scheduler(num_blocks=64, max_num_seqs=4)
    flood = [make_sequence(f"a{index}", 2, index, owner="a", first_token=index * 10)
             for index in range(4)]
    for seq in flood:
        scheduler.add(seq)
    scheduler.schedule()
    append_one_token(flood)
    lone = make_sequence("b0", 2, 9, owner="b", first_token=500)
    scheduler.add(lone)
    batch, is_prefill = scheduler.schedule()
    # a's latest gives its place up (it is recomputed later); b runs at once.
    assert is_prefill and batch == [lone]
    assert flood[3].status is SequenceStatus.WAITING and scheduler.num_preemptions == 1
    # With 3 against 1, neither owner displaces the other any more.
    append_one_token(batch)
    batch, is_prefill = scheduler.schedule()
    assert not is_prefill and set(batch) == {*flood[:3], lone}


def test_a_decode_step_out_of_blocks_preempts_the_owner_holding_the_most():
    scheduler = make_scheduler(num_blocks=6, max_num_seqs=8)
    a0 = make_sequence("a0", 4, 0, owner="a")
    a1 = make_sequence("a1", 4, 1, owner="a", first_token=100)
    b0 = make_sequence("b0", 4, 2, owner="b", first_token=200)
    for seq in (a0, a1, b0):
        scheduler.add(seq)
    scheduler.schedule()
    # The 5th token of each needs a second block: 3 more, 3 free; the 9th: 3 more, none.
    for _ in range(5):
        append_one_token(scheduler.running)
        scheduler.schedule()
    append_one_token(scheduler.running)
    batch, _ = scheduler.schedule()
    assert b0 in batch and a1 not in batch
    assert a1.status is SequenceStatus.WAITING


def test_cancellation_removes_the_sequence_and_frees_its_blocks():
    scheduler = make_scheduler(num_blocks=8)
    running = make_sequence("running", 6, 0)
    waiting = make_sequence("waiting", 6, 1, first_token=100)
    scheduler.add(running)
    scheduler.schedule()
    scheduler.add(waiting)
    assert scheduler.block_manager.num_free_blocks == 6
    cancelled = scheduler.cancel("running")
    assert cancelled is running and running.finish_reason == "cancelled"
    assert running.status is SequenceStatus.FINISHED
    assert scheduler.block_manager.num_free_blocks == 8
    assert scheduler.cancel("waiting") is waiting
    assert scheduler.cancel("unknown") is None
    assert not scheduler.has_unfinished()


def test_scheduler_and_block_manager_run_without_torch():
    """They must load where torch cannot, so the check runs in a fresh interpreter in
    which importing torch fails."""
    script = textwrap.dedent(
        """
        import sys

        class BlockTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this check")
                return None

        sys.meta_path.insert(0, BlockTorch())
        from workers.engine.block_manager import BlockManager
        from workers.engine.config import EngineConfig
        from workers.engine.sampling_params import SamplingParams
        from workers.engine.scheduler import Scheduler
        from workers.engine.sequence import Sequence
        from workers.engine.thinking_budget import ThinkingBudget

        scheduler = Scheduler(BlockManager(4, 4), max_num_seqs=2, max_num_batched_tokens=16)
        scheduler.add(Sequence("r", 0, [1, 2, 3], SamplingParams(), max_num_tokens=16))
        batch, is_prefill = scheduler.schedule()
        if not (is_prefill and len(batch) == 1):
            raise SystemExit("unexpected schedule")
        if "torch" in sys.modules:
            raise SystemExit("torch was imported")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode == 0, result.stderr
