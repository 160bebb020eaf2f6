"""The metrics cost benchmark runs and reports every figure."""

from __future__ import annotations

from benchmarks import bench_metrics


def test_metrics_benchmark_runs() -> None:
    figures = bench_metrics.main(["--events", "2000", "--runs", "1"])
    assert set(figures) == {"timer_per_token_event_ns", "decode_per_token_event_ns",
                            "timer_per_response_us"}
    assert all(value > 0 for value in figures.values())
