"""The one-lease rule of routed requests: a worker's own delivery and the API's deadline
fallback race for the response's first lease, and exactly one of them wins; a stopped
worker's routed requests are found and taken over by a worker that adopts them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from events.subjects import direct_subject, worker_client_name
from harness.waits import until
from journal import Journal, JournalSettings
from journal.routing import fall_back, first_lease, lease_holder
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request


@asynccontextmanager
async def routing_to(url: str, worker: str, deadline_s: float) -> AsyncIterator[Journal]:
    """An API's journal that routes every request to `worker`."""
    api = Journal(JournalSettings(nats_url=url), name="spate-api",
                  route=lambda _: worker, route_deadline_s=deadline_s)
    api.start()
    try:
        if not await api.wait_connected():
            raise TimeoutError("the journal did not connect")
        yield api
    finally:
        await api.close()


async def test_the_first_lease_is_written_once(journal: Journal) -> None:
    js = journal.connection.require()
    assert await lease_holder(js, "SPATE_EVENTS", "resp_route_once") is None
    assert await first_lease(js, "resp_route_once", "worker-a") is not None
    assert await first_lease(js, "resp_route_once", "spate-api") is None
    assert await lease_holder(js, "SPATE_EVENTS", "resp_route_once") == "worker-a"


async def test_a_routed_request_untaken_at_its_deadline_reaches_the_shared_queue(
    journal: Journal,
) -> None:
    rid = "resp_route_fallback"
    # A model of its own: no other test's requests are in its shared queue.
    event = request(rid).model_copy(update={"model": "routed-model"})
    direct = await journal.direct_queue(event.model, "worker-gone", 30, 3)
    shared = await journal.request_queue(event.model, 30, 3)
    async with routing_to(journal.settings.nats_url, "worker-gone", 0.2) as api:
        await api.publish_request(event)
    assert [d.subject for d in await direct.fetch(1, 1)] == [direct_subject(event.model, "worker-gone")]
    fallen = await shared.fetch(1, 3)  # after the deadline, with the API's first lease
    assert len(fallen) == 1 and not fallen[0].subject.endswith("worker-gone")
    # The routed worker, late, must not run it: its first lease is no longer to be had.
    late = await connect(journal.settings.nats_url, name=worker_client_name("worker-gone"))
    try:
        subject = direct_subject(event.model, "worker-gone")
        assert await late.take_delivery_lease(rid, subject) is None
    finally:
        await late.close()


async def test_a_request_its_worker_took_is_not_handed_on(journal: Journal) -> None:
    rid = "resp_route_taken"
    event = request(rid)
    worker = await connect(journal.settings.nats_url, name=worker_client_name("worker-here"))
    subject = direct_subject(event.model, "worker-here")
    try:
        assert await worker.take_delivery_lease(rid, subject) is not None
        # A redelivery to the same worker goes on under a new lease.
        assert await worker.take_delivery_lease(rid, subject) is not None
        js = journal.connection.require()
        assert not await fall_back(js, event, "spate-api", 0.0, 2.0, None)
    finally:
        await worker.close()


async def test_a_stopped_workers_routed_requests_are_adopted(journal: Journal) -> None:
    """Routed to a worker that took the response and stopped: its consumer is found as an
    orphan while its heartbeat is gone, and the adopter's redelivery takes the lease over
    (the holder was the worker the subject names) and so fences the stopped worker."""
    rid = "resp_route_adopted"
    event = request(rid).model_copy(update={"model": "adopted-model"})
    stopped_queue = await journal.direct_queue(event.model, "worker-stopped", 1.5, 5)
    # The API's hand-off (at 30 s) does not come into it.
    async with routing_to(journal.settings.nats_url, "worker-stopped", 30.0) as api:
        await api.publish_request(event)
    stopped = await connect(journal.settings.nats_url, name=worker_client_name("worker-stopped"))
    adopter = await connect(journal.settings.nats_url, name=worker_client_name("worker-adopter"))
    try:
        (delivery,) = await stopped_queue.fetch(1, 2)
        assert await stopped.take_delivery_lease(rid, delivery.subject) is not None
        await stopped_queue.close()  # it stops: no ack, no heartbeat
        live = {"worker-adopter"}
        assert await adopter.orphaned_routes(event.model, live) == ["worker-stopped"]
        assert await adopter.orphaned_routes(event.model, live | {"worker-stopped"}) == []
        adopted = await adopter.direct_queue(event.model, "worker-stopped", 1.5, 5)
        redelivered: list = []
        for _ in range(10):  # after the ack wait
            redelivered = await adopted.fetch(1, 1)
            if redelivered:
                break
        assert [d.num_delivered for d in redelivered] == [2]
        assert await adopter.take_delivery_lease(rid, redelivered[0].subject) is not None
        js = journal.connection.require()
        assert await lease_holder(js, "SPATE_EVENTS", rid) == worker_client_name("worker-adopter")
        await redelivered[0].ack()

        async def nothing_orphaned() -> bool:
            return await adopter.orphaned_routes(event.model, live) == []

        assert await until(nothing_orphaned, timeout=10)  # once the server has the ack
        await adopted.close()
    finally:
        await stopped.close()
        await adopter.close()
