"""The K-quant benchmark runs at a tiny size and times the op on every K-quant type."""

from __future__ import annotations

import pytest

from benchmarks import bench_k_quants_cpu
from kernels import cpu_ops


def test_k_quant_benchmark_runs() -> None:
    if not cpu_ops.available():
        pytest.skip("the fused CPU ops did not build here (the benchmark times them)")
    rows = bench_k_quants_cpu.main(
        ["--rows", "1", "3", "--out", "16", "--in", "256", "--repeats", "1"])
    ops = {(row["kind"], row["rows"]) for row in rows if row["path"] == row["kind"]}
    assert ops == {(kind, n) for kind in ("Q4_K", "Q5_K", "Q6_K") for n in (1, 3)}
    assert all(float(str(row["us"])) > 0 for row in rows)
