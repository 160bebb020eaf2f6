"""bench_backpressure runs end to end at a tiny size: concurrent streams, some read
slowly, through the real API and NATS with the synthetic worker; every event the clients
got matches the fold of the log, and the API's memory is measured."""

from __future__ import annotations

from benchmarks import bench_backpressure


def test_every_stream_matches_its_log() -> None:
    result = bench_backpressure.main(["--streams", "12", "--tokens", "6", "--slow-share", "0.25",
                                      "--slow-pause", "0.01", "--step-interval", "0.002",
                                      "--timeout", "120"])
    assert (result["refused"], result["completed"], result["events_lost"]) == (0, 12, 0)
    # Each stream: created, in_progress, the message item's added events, 6 deltas, the
    # done events and completed or incomplete.
    assert result["events_checked"] >= 12 * 12
    assert result["deltas"] == 12 * 6
    assert 0 < result["api_rss_idle_mib"] <= result["api_rss_peak_mib"]


def test_a_missing_or_changed_event_counts_as_lost() -> None:
    expected = [{"sequence_number": n, "delta": str(n)} for n in range(4)]
    lost_in = bench_backpressure.lost_in
    assert lost_in(expected, expected) == 0
    assert lost_in(expected[:2] + expected[3:], expected) == 1  # one missing
    assert lost_in(expected + expected[-1:], expected) == 1  # one twice
    assert lost_in([expected[1], expected[0], *expected[2:]], expected) == 1  # out of order
    assert lost_in([{"sequence_number": 0, "delta": "x"}, *expected[1:]], expected) == 1
    assert lost_in([*expected, {"sequence_number": 9}], expected) == 1  # not in the log
