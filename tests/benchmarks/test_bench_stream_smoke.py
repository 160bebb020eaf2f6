"""bench_stream runs end to end at a tiny size: the synthetic worker (benchmarks/
synthetic_worker.py over synthetic_engine.py) and the API process with its baseline route
(bench_api) answer every stream, through real NATS, in seconds."""

from __future__ import annotations

from benchmarks import bench_stream


def test_bench_stream_streams_every_token_on_both_paths() -> None:
    rows = bench_stream.main(["--tokens", "6", "--streams", "1", "3", "--step-interval", "0.002",
                              "--timeout", "60"])
    assert [(row["streams"], row["spate"]) for row in rows] == [
        (1, True), (1, False), (3, True), (3, False),
    ]
    assert all(row["deltas_per_s"] > 0 and row["ratio"] > 0 for row in rows)
