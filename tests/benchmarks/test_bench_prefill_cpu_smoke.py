"""The exact-prefill cost benchmark runs at a tiny size and reports both timings."""

from __future__ import annotations

from benchmarks import bench_prefill_cpu


def test_prefill_cost_benchmark_runs() -> None:
    rows = bench_prefill_cpu.main(["--tokens", "16", "40", "--repeats", "1"])
    assert [row["tokens"] for row in rows] == [16, 40]
    assert all(row["exact_ms"] > 0 and row["fused_ms"] > 0 for row in rows)
