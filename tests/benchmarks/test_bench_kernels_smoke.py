"""bench_kernels runs end to end at its smoke sizes on a CPU (Triton under the interpreter),
every op matching its torch reference, so `make bench-gpu` does not first break on a GPU."""

from __future__ import annotations

import csv

from benchmarks import bench_kernels


def test_every_kernel_is_timed_and_matches_its_reference(tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "kernels.csv"
    assert bench_kernels.main(["--smoke", "--repeats", "1", "--csv", str(table)]) == 0
    with table.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"rms_norm", "paged_decode_attention", "prefill_attention"} <= {row["op"] for row in rows}
    assert all(row["parity"] == "ok" for row in rows)
