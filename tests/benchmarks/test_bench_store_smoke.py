"""bench_store runs end to end at tiny sizes: real nats-server, redis-server, the API with
the store on, the synthetic worker and the real default model."""

from __future__ import annotations

from benchmarks import bench_store


def test_store_benchmark_runs_end_to_end() -> None:
    figures = bench_store.main(["--smoke"])
    assert figures["events"] > 0 and figures["lag_p99_ms"] >= figures["lag_p50_ms"]
    assert figures["get_p50_ms"] > 0 and figures["bytes_per_response"] > 0
    assert figures["final_json_bytes"] > 0
    assert figures["turn1_ttft_ms"] > 0 and figures["turn2_ttft_ms"] > 0
    assert 0 < figures["turn2_cached_tokens"] < figures["turn2_input_tokens"]
