"""benchmarks/chaos.py on real processes (nats-server, the API, workers with the default
model): a few trials of `kill -9` of the worker holding a streaming greedy response, each
ending complete, with contiguous sequence numbers and the uninterrupted run's text."""

from __future__ import annotations

from benchmarks import chaos


def test_every_killed_stream_ends_with_the_uninterrupted_text() -> None:
    summary = chaos.main(["--trials", "2", "--tokens", "24", "--seed", "3"])
    assert summary["trials"] == 2
    assert summary["complete"] == 2
    assert summary["contiguous"] == 2
    assert summary["identical"] == 2
    # The replacement waits out the ack wait (5 s; redelivery comes 2/3 to all of it after the kill) before it can take the request over.
    assert 0 < summary["stall_median_s"] <= summary["stall_p99_s"] < 120
