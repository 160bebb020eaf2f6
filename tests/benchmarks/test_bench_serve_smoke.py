"""bench_serve runs end to end at a tiny size: `spate serve` with the real default model,
once per weights setting, one stream of a few tokens each (no llama-server here)."""

from __future__ import annotations

from benchmarks import bench_serve


def test_bench_serve_streams_on_each_weights_setting() -> None:
    results = bench_serve.main(
        ["--streams", "1", "--tokens", "4", "--rounds", "1", "--weights", "quantized", "bf16"]
    )
    assert {name for name, _ in results} == {"spate, quantized weights", "spate, bf16 weights"}
    assert all(streams == 1 for _, streams in results)
    for (total, decode, ttft, ttft_p99), in results.values():
        assert total > 0 and decode > 0 and 0 < ttft <= ttft_p99
