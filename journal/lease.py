"""Who may write a response's log: the holder of its latest lease.

Each delivery of a request (and the API, before it writes a `worker_lost`) takes a lease:
one message on `spate.leases.<response id>` in the EVENTS stream. Every event it then
writes carries that message's stream sequence as the expected last sequence of the lease
subject, so JetStream refuses the writes of anyone whose lease was superseded: a worker
frozen past the ack wait cannot add to a log another worker has taken over.
"""

from __future__ import annotations

import json

from nats.js import JetStreamContext

from events.subjects import lease_subject

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
# Applies the check above to another subject than the one published to (nats-server 2.11+).
EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


async def take_lease(js: JetStreamContext, response_id: str, holder: str) -> int:
    """Supersede every earlier lease of `response_id`; the new lease's stream sequence."""
    ack = await js.publish(lease_subject(response_id), json.dumps({"holder": holder}).encode())
    return int(ack.seq)


def fence_headers(response_id: str, lease_seq: int) -> dict[str, str]:
    """Headers that make a publish fail unless `lease_seq` is still the latest lease."""
    return {
        EXPECTED_LAST_SUBJECT_SEQUENCE: str(lease_seq),
        EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: lease_subject(response_id),
    }
