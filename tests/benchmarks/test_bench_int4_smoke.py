"""The int4 matmul benchmark runs end to end at tiny shapes under the Triton interpreter
(its own process, so the interpreter setting holds from the first import)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_int4_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "int4.csv"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_int4.py"), "--smoke", "--repeats", "1",
         "--csv", str(out)],
        check=True, timeout=300, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    rows = list(csv.DictReader(out.open()))
    assert [row["rows"] for row in rows] == ["1", "3", "17"]
    assert all(float(row["max_abs_diff"]) < 0.5 and float(row["int4_ms"]) > 0 for row in rows)
