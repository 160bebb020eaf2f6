"""The `make bench-gpu` driver (bench_gpu) runs end to end with --smoke on a CPU: it records
the machine and writes both tables, and leaves docs/performance.md alone."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_gpu


def test_the_driver_writes_its_results_and_not_the_docs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    doc = Path(bench_gpu.DOCS_PERFORMANCE)
    before = doc.read_text()
    assert bench_gpu.main(["--smoke", "--dtype", "fp32", "--results-dir", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "machine.json").read_text())["torch"]
    assert (tmp_path / "kernels.csv").read_text().count("\n") > 1
    assert (tmp_path / "decode.csv").read_text().startswith("backend,")
    assert doc.read_text() == before
