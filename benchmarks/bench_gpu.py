"""The `make bench-gpu` driver: records the machine, then runs the per-op kernel benchmarks
at full size and writes their table under benchmarks/results/."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

BENCHMARKS_DIR = Path(__file__).resolve().parent
DEFAULT_RESULTS_DIR = BENCHMARKS_DIR / "results"


def describe_machine() -> dict:
    """Versions and device, saved beside the numbers so runs on different machines compare."""
    machine = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import triton

        machine["triton"] = triton.__version__
    except ImportError:
        machine["triton"] = None
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        machine.update(
            gpu=properties.name,
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            compute_capability=f"{properties.major}.{properties.minor}",
            cuda=torch.version.cuda,
        )
    return machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR)
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="bf16")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, for checking the driver on CPU"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.smoke:
        print(
            "bench-gpu needs a CUDA device (use --smoke to check the driver on CPU)",
            file=sys.stderr,
        )
        return 2

    if not torch.cuda.is_available():
        # The interpreter must be chosen before anything imports triton (describe_machine does).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(BENCHMARKS_DIR))
    import bench_kernels

    args.results_dir.mkdir(parents=True, exist_ok=True)
    machine = describe_machine()
    (args.results_dir / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    print(
        f"machine: {machine.get('gpu', 'cpu')}, torch {machine['torch']}, triton {machine['triton']}"
    )

    kernel_argv = ["--csv", str(args.results_dir / "kernels.csv"), "--dtype", args.dtype]
    if args.smoke:
        kernel_argv.append("--smoke")
    status = bench_kernels.main(kernel_argv)
    if status != 0:
        print("kernel parity failed: see the MISMATCH rows above", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
