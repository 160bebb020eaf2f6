"""bench_spec_decode runs end to end on the default model at a tiny size (both workloads,
1 and 2 streams, a few tokens, one round), in seconds, and checks that both settings
gave the same tokens."""

from __future__ import annotations

from benchmarks import bench_spec_decode


def test_bench_spec_decode_measures_both_settings_on_each_workload() -> None:
    summary = bench_spec_decode.main([
        "--streams", "1", "2", "--tokens", "12", "--rounds", "1", "--num-kv-blocks", "64",
        "--threads", "1",
    ])
    assert set(summary) == {(workload, streams) for workload in ("repetitive", "prose")
                            for streams in (1, 2)}
    for row in summary.values():
        assert row["off"] > 0 and row["on"] > 0
    assert summary[("repetitive", 1)]["drafted"] > 0
