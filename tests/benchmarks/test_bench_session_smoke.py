"""bench_session at a tiny size: a two-turn tool-call session over HTTP with
previous_response_id (store on), over HTTP resending the history, and over the socket
(store off), on real processes."""

from __future__ import annotations

from benchmarks import bench_session


def test_bench_session_times_every_way() -> None:
    row = bench_session.main(["--turns", "2", "--rounds", "1"])
    assert row["turns"] == 2
    assert len(row["http_runs"]) == len(row["resent_runs"]) == len(row["socket_runs"]) == 1
    assert row["http_s"] > 0 and row["resent_s"] > 0 and row["socket_s"] > 0
    assert row["socket_vs_http"] > 0 and row["socket_vs_resent"] > 0
