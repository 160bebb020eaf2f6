"""Continuous batching: which sequences run in the next step, admitted from the waiting
queue between steps and preempted (to be recomputed later) when KV blocks run out.

The batch is shared fairly between owners (API keys): among waiting sequences of the
most urgent priority, the owner with the fewest running goes first (then arrival order),
so an owner with 200 waiting gets no more of the batch than one with 1 while both wait.
Preemption is fair too: a full batch makes room for an owner holding less than its share
by preempting the latest sequence of the owner holding the most.
"""

from __future__ import annotations

from bisect import insort
from collections import Counter

from workers.engine.block_manager import BlockManager
from workers.engine.sequence import Sequence, SequenceStatus


class Scheduler:
    """Both queues stay sorted by (priority, arrival); within a priority, admission and
    preemption go by owner as the module says. A step is either a prefill batch or a
    decode batch, never a mix, so each forward pass has one shape of work."""

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
        running = Counter(seq.params.owner for seq in self.running)
        while self.waiting:
            seq = self._next_waiting(running)
            num_new_tokens = seq.num_tokens  # an upper bound: prefix hits only lower it
            if scheduled and num_batched_tokens + num_new_tokens > self.max_num_batched_tokens:
                break
            while not self._has_room_for(seq):
                victim = self._victim_for(seq, scheduled, running)
                if victim is None:
                    return scheduled
                running[victim.params.owner] -= 1
                self._preempt(victim)
            self.waiting.remove(seq)
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            insort(self.running, seq, key=_schedule_key)
            running[seq.params.owner] += 1
            scheduled.append(seq)
            num_batched_tokens += seq.num_tokens - seq.num_cached_tokens
        return scheduled

    def _next_waiting(self, running: Counter[str | None]) -> Sequence:
        """The waiting sequence to admit next: the most urgent priority, then the owner
        with the fewest running, then the earliest arrival."""
        priority = self.waiting[0].params.priority  # the queue is sorted by priority first
        best = self.waiting[0]
        best_key = (running[best.params.owner], best.arrival_order)
        for seq in self.waiting[1:]:
            if seq.params.priority != priority:
                break
            key = (running[seq.params.owner], seq.arrival_order)
            if key < best_key:
                best, best_key = seq, key
        return best

    def _has_room_for(self, seq: Sequence) -> bool:
        return len(self.running) < self.max_num_seqs and self.block_manager.can_allocate(seq)

    def _victim_for(
        self, seq: Sequence, scheduled: list[Sequence], running: Counter[str | None]
    ) -> Sequence | None:
        """A running sequence the waiting one may displace: one of strictly lower priority
        (higher value), or of equal priority from an owner holding at least two more
        running sequences than the waiting one's owner (the latest of the owner holding
        the most). Anything less would only trade recomputation for recomputation."""
        candidates = [victim for victim in self.running if victim not in scheduled]
        lower = [victim for victim in candidates if victim.params.priority > seq.params.priority]
        if lower:
            return max(lower, key=_schedule_key)
        share = running[seq.params.owner]
        fair = [victim for victim in candidates
                if victim.params.priority == seq.params.priority
                and running[victim.params.owner] > share + 1]
        if not fair:
            return None
        return max(fair, key=lambda victim: (running[victim.params.owner], victim.arrival_order))

    def _schedule_decode(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        remaining = self.running
        self.running = []
        while remaining:
            seq = remaining.pop(0)
            while not self.block_manager.can_append(seq):
                if remaining:
                    victim = _decode_victim(remaining, [*scheduled, seq, *remaining])
                    remaining.remove(victim)
                    self._preempt(victim)
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


def _decode_victim(remaining: list[Sequence], batch: list[Sequence]) -> Sequence:
    """Which of `remaining` gives its blocks up when a decode step runs out: the least
    urgent priority, then the owner with the most sequences in the batch, then the latest."""
    owners = Counter(seq.params.owner for seq in batch)
    return max(remaining, key=lambda seq: (seq.params.priority, owners[seq.params.owner],
                                           seq.arrival_order))
