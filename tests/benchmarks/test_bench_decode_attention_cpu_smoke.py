"""The CPU decode-attention benchmark runs at a tiny size and times both paths."""

from __future__ import annotations

from benchmarks import bench_decode_attention_cpu
from kernels import cpu_ops


def test_decode_attention_benchmark_runs() -> None:
    rows = bench_decode_attention_cpu.main(
        ["--batch", "1", "4", "--context", "20", "--layers", "2", "--repeats", "1"])
    assert [(row["batch"], row["context"]) for row in rows] == [(1, 20), (4, 20)]
    assert all(row["torch_ms"] > 0 for row in rows)
    if cpu_ops.available():
        assert all(row["fused_ms"] > 0 for row in rows)
