"""bench_serve runs end to end at a tiny size: `spate serve` with the real default model,
once per decode-thread setting, one stream of a few tokens each."""

from __future__ import annotations

from benchmarks import bench_serve


def test_bench_serve_streams_on_each_thread_setting() -> None:
    results = bench_serve.main(["--streams", "1", "--tokens", "4", "--rounds", "1"])
    assert len(results) == 2 and all(streams == 1 for _, streams in results)
    for (total, decode, _ttft), in results.values():
        assert total > 0 and decode > 0
