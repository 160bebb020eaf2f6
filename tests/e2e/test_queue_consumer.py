"""What a queue consumer outside spate sees on the REQUESTS and EVENTS streams."""

from __future__ import annotations

import asyncio
import json

import httpx
import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

from events import GenerationFinished, RequestAccepted, decode
from events.subjects import EVENTS_STREAM, REQUESTS_STREAM, events_subject
from tests.conftest import DEFAULT_MODEL, Stack


async def read_requests(nats_url: str, response_ids: set[str]) -> dict[str, RequestAccepted]:
    """Read request events as an outside consumer would: its own consumer, all subjects."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    found: dict[str, RequestAccepted] = {}
    sub = await js.pull_subscribe(
        "spate.requests.>", stream=REQUESTS_STREAM,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    try:
        while response_ids - found.keys():
            for msg in await sub.fetch(batch=100, timeout=5):
                event = decode(msg.data)
                if event.response_id in response_ids:
                    found[event.response_id] = event
                await msg.ack()
    finally:
        await nc.close()
    return found


async def read_log(nats_url: str, response_id: str) -> list[object]:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    sub = await js.subscribe(events_subject(response_id), stream=EVENTS_STREAM,
                             ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    events = []
    try:
        while not events or not isinstance(events[-1], GenerationFinished):
            msg = await sub.next_msg(timeout=30)
            events.append(decode(msg.data))
    finally:
        await nc.close()
    return events


def test_budget_lowering_and_event_log(stack: Stack) -> None:
    budgets = {"absent": None, "unlimited": -1, "256": 256}
    ids = {}
    for name, budget in budgets.items():
        body: dict[str, object] = {"model": DEFAULT_MODEL, "input": f"Hi ({name})",
                                   "max_output_tokens": 3, "temperature": 0}
        if budget is not None:
            body["thinking_token_budget"] = budget
        reply = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        ids[name] = reply.json()["id"]

    requests = asyncio.run(read_requests(stack.nats_url, set(ids.values())))
    assert requests[ids["absent"]].thinking_token_budget is None
    assert requests[ids["unlimited"]].thinking_token_budget is None
    assert requests[ids["256"]].thinking_token_budget == 256
    assert "thinking_token_budget" in json.loads(requests[ids["256"]].model_dump_json())

    log = asyncio.run(read_log(stack.nats_url, ids["256"]))
    assert [event.seq for event in log] == list(range(len(log)))
    assert isinstance(log[0], RequestAccepted)
    assert [event.type for event in log][1] == "generation.started"
    assert log[-1].usage.output_tokens == 3
