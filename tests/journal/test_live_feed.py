"""Live = log, against real nats-servers: a follower receives only what the events stream
stored (never a fenced writer's refused events), on one node and on a three-node
cluster, through one subscription per process that carries every response it follows;
a stream declared before the live subjects existed gets them when a process connects."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import GenerationFinished, GenerationStarted, fold
from events.subjects import (
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    LIVE_EVENTS_SUBJECT_PREFIX,
    live_events_subject,
)
from harness.waits import until
from journal import Journal, LogFollower
from tests.journal.conftest import connect
from tests.journal.stale_writer import (
    STALE_TEXT,
    STORED_TEXT,
    take_over_under_a_stale_writer,
)
from tests.journal.test_log_reader import request
from tests.nats_cluster import NatsCluster


@pytest.fixture(scope="module", params=["one node", "three nodes"])
def bus(request: pytest.FixtureRequest) -> Iterator[tuple[list[str], int]]:
    """The servers' URLs and the streams' replica count."""
    if request.param == "one node":
        with EmbeddedNats() as server:
            yield [server.url], 1
    else:
        with NatsCluster(3) as cluster:
            yield [node.url for node in cluster.nodes.values()], 3


@pytest.fixture
async def journals(bus: tuple[list[str], int]) -> AsyncIterator[list[Journal]]:
    """Four processes' journals (follower, stale writer, new writer, witness), each on
    its own node where there are several."""
    urls, replicas = bus
    connected = [await connect(urls[index % len(urls)], name=f"spate-live-{index}",
                               stream_replicas=replicas) for index in range(4)]
    try:
        yield connected
    finally:
        for journal in connected:
            await journal.close()


async def read_to_the_end(follower: LogFollower) -> list[Any]:
    events: list[Any] = []
    while not events or not isinstance(events[-1], GenerationFinished):
        event = await follower.next(timeout=10)
        if event is None:
            raise AssertionError(f"the log stopped at {[e.seq for e in events]}")
        events.append(event)
    return events


def text_of(events: list[Any]) -> str:
    return "".join(getattr(event, "text", "") for event in events[1:])


async def test_a_fenced_writers_events_never_reach_a_follower(journals: list[Journal]) -> None:
    reader, old, new, witness = journals
    rid = f"resp_fenced_{len(reader.settings.nats_url)}"
    follower = await reader.follow(rid)
    try:
        await reader.publish_request(request(rid))
        took = await take_over_under_a_stale_writer(old, new, witness, rid)
        # The refused events did cross the bus: a plain subscriber of the log's subject
        # got them all. The follower got none.
        assert took.stale_sent >= 1 and took.stale_witnessed == took.stale_sent, took
        followed = await read_to_the_end(follower)
        stored = await reader.read_log(rid)
        assert followed == stored
        assert text_of(followed) == STORED_TEXT and STALE_TEXT not in text_of(followed)
        assert fold(followed).response() == fold(stored).response()
        assert await follower.next(timeout=0.3) is None
    finally:
        await follower.close()


async def test_one_subscription_carries_every_followed_response() -> None:
    """Followers of several responses (two of one of them) in one process: one
    subscription on the server, each follower gets its own response's events only, and
    closing followers leaves that one subscription in place."""
    monitor = free_port()

    def subscriptions() -> list[str]:
        """The connection's subjects, less the inbox of its publish acks."""
        url = f"http://127.0.0.1:{monitor}/connz?subs=1"
        with urllib.request.urlopen(url, timeout=5) as reply:
            connections = json.load(reply)["connections"]
        return [subject for conn in connections if conn.get("name") == "spate-demux"
                for subject in conn.get("subscriptions_list", [])
                if not subject.startswith("_INBOX.")]

    with EmbeddedNats(extra_args=("-m", str(monitor))) as server:
        journal = await connect(server.url, name="spate-demux")
        try:
            assert subscriptions() == []
            rids = [f"resp_demux_{index}" for index in range(5)]
            followers = [await journal.follow(rid) for rid in rids]
            twin = await journal.follow(rids[0])
            assert journal.live_feed.following == len(rids)
            only_live = [f"{LIVE_EVENTS_SUBJECT_PREFIX}.>"]
            assert await until(lambda: subscriptions() == only_live, 20), subscriptions()
            for index, rid in enumerate(rids):
                await journal.publish_request(request(rid))
                writer = journal.writer(rid, 1, await journal.take_lease(rid))
                await writer.publish(GenerationStarted, worker_id="w", input_tokens=index)
                await writer.flush()
            for index, (rid, follower) in enumerate(zip(rids, followers, strict=True)):
                first, second = await follower.next(timeout=5), await follower.next(timeout=5)
                assert (first.response_id, second.response_id) == (rid, rid)
                assert second.input_tokens == index
            assert [(await twin.next(timeout=5)).seq for _ in range(2)] == [0, 1]
            for follower in [*followers, twin]:
                await follower.close()
            assert journal.live_feed.following == 0
            assert subscriptions() == only_live
        finally:
            await journal.close()


async def test_a_stream_declared_without_live_subjects_gets_them() -> None:
    """An events stream from before the live subjects (no republish) is brought to the
    current configuration by the first process that connects: its stored events then
    reach the live subject."""
    with EmbeddedNats() as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name=EVENTS_STREAM, subjects=[f"{EVENTS_SUBJECT_PREFIX}.>"])
            assert (await js.stream_info(EVENTS_STREAM)).config.republish is None
            journal = await connect(server.url, name="spate-upgrade")
            try:
                republish = (await js.stream_info(EVENTS_STREAM)).config.republish
                assert republish is not None
                assert republish.dest == f"{LIVE_EVENTS_SUBJECT_PREFIX}.>"
                live: list[str] = []

                async def on_live(msg: Any) -> None:
                    live.append(msg.subject)

                await nc.subscribe(f"{LIVE_EVENTS_SUBJECT_PREFIX}.>", cb=on_live)
                await nc.flush()
                await journal.publish_request(request("resp_upgraded"))
                assert await until(lambda: live == [live_events_subject("resp_upgraded")], 20)
            finally:
                await journal.close()
        finally:
            await nc.close()
