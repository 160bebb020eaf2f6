"""Real response logs for the store tests, projected as the projector will: fold each
event and append what the fold produced."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from events import (
    ChatMessage,
    GenerationFinished,
    GenerationStarted,
    RequestAccepted,
    ResponseFold,
    TokensGenerated,
    Usage,
    fold,
)
from store.base import Store


def new_response_id() -> str:
    return f"resp_{secrets.token_hex(8)}"


def response_log(response_id: str, answer: tuple[str, ...] = ("Hel", "lo", "!")) -> list[Any]:
    """A whole log: accepted, started, some reasoning, the answer in pieces, finished."""
    events: list[Any] = [
        RequestAccepted(
            response_id=response_id, seq=0, model="m", created_at=1000.0,
            messages=(ChatMessage(role="user", content="hi"),),
        ),
        GenerationStarted(response_id=response_id, seq=1, worker_id="w", input_tokens=3),
        TokensGenerated(response_id=response_id, seq=2, channel="reasoning", text="hmm", token_ids=(1,)),
    ]
    for text in answer:
        events.append(TokensGenerated(
            response_id=response_id, seq=len(events), channel="text", text=text, token_ids=(2,),
        ))
    events.append(GenerationFinished(
        response_id=response_id, seq=len(events), finish_reason="stop",
        usage=Usage(input_tokens=3, output_tokens=len(answer) + 1, reasoning_tokens=1),
    ))
    return events


def input_items_of(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"msg_in{index}", "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": f"turn {index}"}]}
        for index in range(count)
    ]


@dataclass
class Step:
    """What one event adds to the store, as the fold computed it."""

    event: Any
    sse_events: list[dict[str, Any]]
    response: dict[str, Any]
    status: str

    async def append_to(self, store: Store, **extra: Any) -> bool:
        return await store.append(
            self.event.response_id, self.event.seq,
            sse_events=self.sse_events, status=self.status, response=self.response, **extra,
        )


def steps(events: list[Any]) -> list[Step]:
    state = ResponseFold()
    result = []
    for event in events:
        produced = state.apply(event)
        result.append(Step(event, produced, state.response(), state.status or "queued"))
    return result


async def project(store: Store, events: list[Any], **first: Any) -> ResponseFold:
    """Append a whole log; `first` goes with seq 0 (owner, input_items)."""
    for step in steps(events):
        await step.append_to(store, **(first if step.event.seq == 0 else {}))
    return fold(events)
