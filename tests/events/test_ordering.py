from __future__ import annotations

from events import GenerationStarted
from events.ordering import SeqOrder


def event(seq: int) -> GenerationStarted:
    return GenerationStarted(response_id="resp_x", seq=seq, worker_id="w", input_tokens=1)


def test_holds_early_events_until_the_gap_closes() -> None:
    order = SeqOrder()
    assert [e.seq for e in order.push(event(0))] == [0]
    assert order.push(event(2)) == []
    assert order.push(event(3)) == []
    assert [e.seq for e in order.push(event(1))] == [1, 2, 3]
    assert order.push(event(2)) == []
    assert order.waiting == 0
