"""Continuous batching: which sequences run in the next step, admitted from the waiting
queue between steps and preempted (to be recomputed later) when KV blocks run out."""

from __future__ import annotations

from bisect import insort

from workers.engine.block_manager import BlockManager
from workers.engine.sequence import Sequence, SequenceStatus


class Scheduler:
    """Both queues stay sorted by (priority, arrival): the head of `waiting` is admitted
    first and the tail of `running` is preempted first. A step is either a prefill batch
    or a decode batch, never a mix, so each forward pass has one shape of work."""

    def __init__(
        self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        insort(self.waiting, seq, key=_schedule_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, request_id: str) -> Sequence | None:
        for queue in (self.running, self.waiting):
            for seq in queue:
                if seq.request_id == request_id:
                    return seq
        return None

    def schedule(self) -> tuple[list[Sequence], bool]:
        """The sequences of the next step and whether it is a prefill step."""
        self.block_manager.start_step()
        prefill_batch = self._schedule_prefill()
        if prefill_batch:
            return prefill_batch, True
        return self._schedule_decode(), False

    def _schedule_prefill(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        num_batched_tokens = 0
        while self.waiting:
            seq = self.waiting[0]
            num_new_tokens = seq.num_tokens  # an upper bound: prefix hits only lower it
            if scheduled and num_batched_tokens + num_new_tokens > self.max_num_batched_tokens:
                break
            while not self._has_room_for(seq):
                victim = self._lower_priority_victim(seq, scheduled)
                if victim is None:
                    return scheduled
                self._preempt(victim)
            self.waiting.pop(0)
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            insort(self.running, seq, key=_schedule_key)
            scheduled.append(seq)
            num_batched_tokens += seq.num_tokens - seq.num_cached_tokens
        return scheduled

    def _has_room_for(self, seq: Sequence) -> bool:
        return len(self.running) < self.max_num_seqs and self.block_manager.can_allocate(seq)

    def _lower_priority_victim(self, seq: Sequence, scheduled: list[Sequence]) -> Sequence | None:
        """A running sequence of strictly lower priority (higher value) that the waiting
        one may displace. Equal priorities never displace each other: that would only trade
        recomputation for recomputation."""
        for victim in reversed(self.running):
            if victim.params.priority <= seq.params.priority:
                return None
            if victim not in scheduled:
                return victim
        return None

    def _schedule_decode(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        remaining = self.running
        self.running = []
        while remaining:
            seq = remaining.pop(0)
            while not self.block_manager.can_append(seq):
                if remaining:
                    self._preempt(remaining.pop())
                else:
                    self._preempt(seq)
                    break
            else:
                self.block_manager.may_append(seq)
                scheduled.append(seq)
        self.running = list(scheduled)
        return scheduled

    def _preempt(self, seq: Sequence) -> None:
        """Drops the sequence's KV; it waits again and recomputes prompt and output so far
        when readmitted, keeping its arrival order so it is not overtaken by later ones."""
        if seq in self.running:
            self.running.remove(seq)
        self.block_manager.free(seq)
        self.num_preemptions += 1
        self.add(seq)

    def cancel(self, request_id: str) -> Sequence | None:
        """Stops an unfinished sequence and frees its blocks; None if there is none."""
        seq = self.find(request_id)
        if seq is not None:
            self.finish(seq, "cancelled")
        return seq

    def finish(self, seq: Sequence, finish_reason: str) -> None:
        """Removes a finished or cancelled sequence from whichever queue holds it and frees
        its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.block_manager.free(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = finish_reason


def _schedule_key(seq: Sequence) -> tuple[int, int]:
    return seq.schedule_key
