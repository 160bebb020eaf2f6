"""bench_resume at a tiny size: a worker killed after a few streamed tokens, the stall to
the replacement's next token measured on real processes."""

from __future__ import annotations

from benchmarks import bench_resume


def test_bench_resume_measures_the_stall_after_a_kill() -> None:
    rows = bench_resume.main(["--emitted", "3", "--after", "48"])
    assert [row["emitted_deltas"] for row in rows] == [3]
    (row,) = rows
    assert row["resumed_tokens"] >= 3
    # Redelivery comes only after the ack wait; the rest is reading the log and one prefill.
    assert row["stall_s"] > 0 and row["stall_less_ack_wait_s"] < 120
