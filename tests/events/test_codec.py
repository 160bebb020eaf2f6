"""The codec: current events in one pass, older versions upcast on read, strangers refused."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from events import AnyEvent, EventDecodeError, ReasoningEnded, decode, encode, fold
from events.codec import UPCASTERS, upcast
from events.fold import UnknownEventType
from tests.events.test_fold import RID, accepted, finished, log_of, started, tokens


def v1_reasoning_ended(seq: int, cause: str) -> bytes:
    """A reasoning.ended as version 1 wrote it (before `model` became `end_marker`)."""
    return json.dumps({"response_id": RID, "seq": seq, "created_at": 1000.5,
                       "type": "reasoning.ended", "v": 1, "cause": cause,
                       "reasoning_tokens": 2}).encode()


def test_a_v1_reasoning_ended_is_upcast() -> None:
    event = decode(v1_reasoning_ended(3, "model"))
    assert isinstance(event, ReasoningEnded)
    assert (event.v, event.cause, event.reasoning_tokens) == (2, "end_marker", 2)
    assert decode(v1_reasoning_ended(3, "budget")).cause == "budget"
    assert decode(json.loads(v1_reasoning_ended(3, "model"))).cause == "end_marker"


def test_an_old_log_folds_like_the_new_one() -> None:
    new_log = log_of(
        started(), tokens("reasoning", "hm"),
        ReasoningEnded(response_id=RID, seq=1, created_at=1000.5, cause="end_marker",
                       reasoning_tokens=2),
        tokens("text", "Yes"), finished("stop", 3, reasoning=2),
    )
    stored = [encode(event) for event in new_log]  # type: ignore[arg-type]
    stored[3] = v1_reasoning_ended(3, "model")
    old_log = [decode(data) for data in stored]
    assert old_log == new_log
    assert fold(old_log).sse_events == fold(new_log).sse_events


def test_current_payloads_are_not_touched() -> None:
    event = ReasoningEnded(response_id=RID, seq=1, cause="budget", reasoning_tokens=1)
    payload = json.loads(encode(event))
    assert upcast(dict(payload)) == payload
    assert decode(encode(event)) == event


def test_every_upcaster_lifts_a_version_below_the_current_one() -> None:
    (union, _) = get_args(AnyEvent)
    current = {model.model_fields["type"].default: model.model_fields["v"].default
               for model in get_args(union)}
    for event_type, version in UPCASTERS:
        assert version < current[event_type], (event_type, version)


@pytest.mark.parametrize("payload", [
    b'{"type": "summary.written", "v": 1, "response_id": "r", "seq": 1}',
    b'{"type": "reasoning.ended", "v": 7, "response_id": "r", "seq": 1, "cause": "model"}',
    b'{"response_id": "r", "seq": 1}',
    b"not json",
])
def test_an_event_this_code_cannot_read_is_refused(payload: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode(payload)


def test_the_fold_refuses_an_unknown_event_loudly() -> None:
    with pytest.raises(UnknownEventType):
        fold([accepted()]).apply(object())
