"""Every Triton kernel compiles for sm_80 and sm_90, within the hardware's limits and without
spilling a register, at two model shapes in bf16 and fp32; checked without a GPU.

The interpreter the other kernel tests run under accepts things the real compiler rejects
and says nothing of registers, so scripts/kernel_resources.py compiles each launch the
launchers really make, in a fresh process without TRITON_INTERPRET, and fails on a compile
error, a spill, or a block asking for more shared memory or registers than the target has.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "kernel_resources.py"
sys.path.insert(0, str(SCRIPT.parent))

from kernel_launches import DTYPES, SHAPES  # noqa: E402


def kernels_in_source() -> set[str]:
    """The `*_kernel` functions under @triton.jit in kernels/, read from the source, so a
    kernel the script failed to discover still has to show up in its table."""
    pattern = re.compile(r"@triton\.jit\s*\ndef (\w+_kernel)\(")
    sources = [path.read_text() for path in (REPO_ROOT / "kernels").glob("*.py")]
    return {name for source in sources for name in pattern.findall(source)}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_every_kernel_compiles_within_sm80_and_sm90_limits_without_spills():
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "2"],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=540,
    )
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert result.returncode == 0 and not failed, "\n".join(failed) or result.stderr[-3000:]

    # | `kernel` | launch | shape | dtype | tiles | warps | sm_80 regs | ... | sm_90 smem |
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| `")]
    covered = {(cells[0].strip(" `"), cells[2].strip(), cells[3].strip()) for cells in rows}
    expected = {(k, s, d) for k in kernels_in_source() for s in SHAPES for d in DTYPES}
    assert {"_prefill_attention_kernel", "_paged_decode_attention_kernel"} <= kernels_in_source()
    assert expected <= covered, f"never compiled: {sorted(expected - covered)}"
    # Both targets' figures on every row: registers are a number, not '-' or 'error'.
    for cells in rows:
        assert cells[6].strip().isdigit() and cells[9].strip().isdigit(), cells
