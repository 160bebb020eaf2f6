"""bench_store_rebuild at a tiny size: every response written comes back completed."""

from __future__ import annotations

from benchmarks import bench_store_rebuild


def test_every_response_is_rebuilt() -> None:
    result = bench_store_rebuild.main(["--responses", "20", "--tokens", "4"])
    assert result["responses"] == result["complete"] == 20
    assert result["events"] == 20 * (4 + 3)
