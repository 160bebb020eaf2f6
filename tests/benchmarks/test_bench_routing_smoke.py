"""bench_routing at a tiny size: two chains of two turns on two workers, with routing
on and off, on real processes."""

from __future__ import annotations

from benchmarks import bench_routing


def test_bench_routing_compares_routed_with_plain() -> None:
    row = bench_routing.main(["--chains", "2", "--turns", "2", "--history", "60", "--output", "4",
                              "--rounds", "2"])
    for mode in ("routed", "plain"):
        assert 0 <= row[mode]["hit_rate"] <= 1
        assert row[mode]["ttft_p50_s"] > 0
        assert sum(row[mode]["per_worker"].values()) == 8  # 2 rounds of 2 chains of 2 turns
    assert row["ttft_speedup"] > 0
