"""bench_tenants at a tiny size: one key floods with background requests while another
is measured, on real processes; the row it reports is whole and consistent."""

from __future__ import annotations

from benchmarks import bench_tenants


def test_bench_tenants_measures_a_key_while_another_floods() -> None:
    row = bench_tenants.main(["--keys", "2", "--flood", "6", "--rounds", "2", "--tokens", "2",
                              "--flood-tokens", "8", "--max-num-seqs", "4"])
    assert row["flood_accepted"] == 6 and row["flood_refused"] == 0
    assert 0 < row["idle_p50_s"] <= row["idle_p99_s"]
    assert 0 < row["flood_p50_s"] <= row["flood_p99_s"]
    assert row["p99_ratio"] == row["flood_p99_s"] / row["idle_p99_s"]
