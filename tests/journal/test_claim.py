"""A client-chosen response id is claimed atomically when its request is published,
against a real nats-server: of requests racing for one id, exactly one gets its log."""

from __future__ import annotations

import asyncio

import pytest

from events import ChatMessage, RequestAccepted, encode
from events.subjects import events_subject
from journal import Journal, ResponseIdTaken


def request(response_id: str, content: str) -> RequestAccepted:
    return RequestAccepted(response_id=response_id, seq=0, model="claim-model",
                           messages=(ChatMessage(role="user", content=content),))


async def test_one_of_many_racing_claims_wins(journal: Journal) -> None:
    claims = [journal.publish_request(request("race-1", f"from client {n}"), claim=True)
              for n in range(8)]
    outcomes = await asyncio.gather(*claims, return_exceptions=True)
    assert sum(outcome is None for outcome in outcomes) == 1
    assert all(isinstance(outcome, ResponseIdTaken) for outcome in outcomes if outcome is not None)
    log = await journal.read_log("race-1")
    assert len(log) == 1  # the winner's seq 0 alone
    winner = outcomes.index(None)
    assert log[0].messages[0].content == f"from client {winner}"


async def test_a_log_already_written_cannot_be_claimed(journal: Journal) -> None:
    await journal.publish_request(request("taken-1", "first"))
    with pytest.raises(ResponseIdTaken):
        await journal.publish_request(request("taken-1", "second"), claim=True)
    # Past the duplicate window, JetStream's expected last sequence does it: a log that
    # holds any message (here one with no message id) refuses a claim. A whole event, so
    # other tests reading every log on this server can decode it.
    await journal.connection.require().publish(
        events_subject("taken-2"), encode(request("taken-2", "first")))
    with pytest.raises(ResponseIdTaken):
        await journal.publish_request(request("taken-2", "second"), claim=True)
