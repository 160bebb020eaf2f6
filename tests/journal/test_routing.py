"""The one-lease rule of routed requests: a worker's own delivery and the API's deadline
fallback race for the response's first lease, and exactly one of them wins."""

from __future__ import annotations

from events.subjects import direct_subject
from journal import Journal
from journal.routing import fall_back, first_lease, lease_holder
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request


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
    journal.route = lambda _: "worker-gone"
    journal.route_deadline_s = 0.2
    direct = await journal.direct_queue(event.model, "worker-gone", 30, 3)
    shared = await journal.request_queue(event.model, 30, 3)
    await journal.publish_request(event)
    assert [d.subject for d in await direct.fetch(1, 1)] == [direct_subject(event.model, "worker-gone")]
    fallen = await shared.fetch(1, 3)  # after the deadline, with the API's first lease
    assert len(fallen) == 1 and not fallen[0].subject.endswith("worker-gone")
    # The routed worker, late, must not run it: its first lease is no longer to be had.
    late = await connect(journal.settings.nats_url, name="worker-gone")
    try:
        assert await late.take_delivery_lease(rid, direct=True) is None
    finally:
        await late.close()


async def test_a_request_its_worker_took_is_not_handed_on(journal: Journal) -> None:
    rid = "resp_route_taken"
    event = request(rid)
    worker = await connect(journal.settings.nats_url, name="worker-here")
    try:
        assert await worker.take_delivery_lease(rid, direct=True) is not None
        # A redelivery to the same worker goes on under a new lease.
        assert await worker.take_delivery_lease(rid, direct=True) is not None
        js = journal.connection.require()
        assert not await fall_back(js, event, "spate-api", 0.0, 2.0, None)
    finally:
        await worker.close()
