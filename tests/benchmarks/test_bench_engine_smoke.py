"""bench_engine runs end to end on the default model at a tiny size (two concurrencies, a
couple of decode steps, two rounds over two weight formats), in seconds."""

from __future__ import annotations

from benchmarks import bench_engine


def test_bench_engine_measures_each_weight_format_and_concurrency() -> None:
    measured = bench_engine.main([
        "--dtype", "bfloat16", "--weights", "quantized", "bf16", "--rounds", "2",
        "--concurrency", "1", "2", "--steps", "2", "--windows", "1",
        "--warmup-steps", "1", "--num-kv-blocks", "32", "--threads", "1",
    ])
    assert set(measured) == {"quantized", "bf16"}
    for rates in measured.values():
        assert set(rates) == {1, 2}
        assert all(rate > 0 for rate in rates.values())
