"""bench_first_token runs end to end at a tiny size: `spate serve` with the real default
model, a few requests, each first token split into its parts by the events' stamps."""

from __future__ import annotations

from benchmarks import bench_first_token


def test_bench_first_token_splits_each_first_token() -> None:
    summary = bench_first_token.main(["--requests", "3", "--tokens", "2"])
    assert set(summary) == {"api", "queue", "prefill", "back", "total"}
    p50_total, p99_total = summary["total"]
    assert 0 < p50_total <= p99_total
    # The parts run from the client's send to its first delta, one after another.
    assert all(p50 > 0 for part, (p50, _) in summary.items() if part != "total")
