"""The GPU benchmark's decode part runs end to end on a CPU (tiny model, interpreter),
so `make bench-gpu` does not first break on a GPU machine."""

from __future__ import annotations

from benchmarks import bench_decode


def test_decode_benchmark_runs_both_backends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = bench_decode.main(["--smoke", "--csv", str(tmp_path / "decode.csv")])
    assert {row["backend"] for row in rows} == {"torch", "triton"}
    assert all(float(row["tokens_per_s"]) > 0 for row in rows)
    assert (tmp_path / "decode.csv").read_text().startswith("backend,sequences,step_ms,tokens_per_s")
