"""The API's reader of a response log, against a real nats-server: events come out in
seq order, once each, even when the live subscription missed some."""

from __future__ import annotations

import asyncio

import pytest

from api.bus import Bus
from api.settings import ApiSettings
from cli.nats_server import EmbeddedNats
from events import ChatMessage, GenerationStarted, RequestAccepted, encode
from events.subjects import event_msg_id, events_subject

RID = "resp_eventlog"


def event(seq: int) -> object:
    if seq == 0:
        return RequestAccepted(response_id=RID, seq=0, model="m",
                               messages=(ChatMessage(role="user", content="hi"),))
    return GenerationStarted(response_id=RID, seq=seq, worker_id="w", input_tokens=seq)


async def publish(bus: Bus, seq: int) -> None:
    js = bus._require()
    await js.publish(events_subject(RID), encode(event(seq)),
                     headers={"Nats-Msg-Id": event_msg_id(RID, seq)})


async def connected_bus(url: str) -> Bus:
    bus = Bus(ApiSettings(nats_url=url))
    await bus.start()
    for _ in range(100):
        if bus.connected:
            return bus
        await asyncio.sleep(0.05)
    raise TimeoutError("bus did not connect")


@pytest.mark.asyncio
async def test_missed_and_reordered_events_come_out_in_order(nats_server: EmbeddedNats) -> None:
    bus = await connected_bus(nats_server.url)
    try:
        for seq in (0, 1, 2):  # stored before the live subscription exists: missed by it
            await publish(bus, seq)
        log = await bus.follow(RID)
        seen = [(await log.next(timeout=2)).seq for _ in range(3)]
        assert seen == [0, 1, 2]
        await publish(bus, 4)  # arrives early; 3 comes after
        await publish(bus, 3)
        seen += [(await log.next(timeout=2)).seq for _ in range(2)]
        assert seen == [0, 1, 2, 3, 4]
        await publish(bus, 3)  # a retried publish the stream drops as a duplicate
        assert await log.next(timeout=0.5) is None
        await log.close()
    finally:
        await bus.close()
