"""The `make bench-gpu` driver: records the machine, runs the per-op kernel benchmarks at
full size and the decode benchmark (Triton against torch kernels), writes CSVs under
benchmarks/results/ and the tables into docs/performance.md."""

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

    import bench_decode

    decode_argv = ["--csv", str(args.results_dir / "decode.csv")]
    if args.smoke:
        decode_argv.append("--smoke")
    decode_rows = bench_decode.main(decode_argv)
    if not args.smoke:
        write_performance_section(
            DOCS_PERFORMANCE, machine, args.results_dir / "kernels.csv", decode_rows
        )
        print(f"updated {DOCS_PERFORMANCE}")
    return status


DOCS_PERFORMANCE = BENCHMARKS_DIR.parent / "docs" / "performance.md"
SECTION_START = "<!-- bench-gpu:start -->"
SECTION_END = "<!-- bench-gpu:end -->"


def write_performance_section(
    doc: Path, machine: dict, kernels_csv: Path, decode_rows: list[dict]
) -> None:
    """Replace the GPU section of docs/performance.md with this run's tables."""
    import csv

    lines = [
        SECTION_START,
        f"Machine: {machine.get('gpu')}, CUDA {machine.get('cuda')}, torch {machine['torch']}, "
        f"triton {machine['triton']}; recorded {machine['recorded_at']} by `make bench-gpu`.",
        "",
        "| op | shape | max abs diff | Triton ms | torch eager ms | speedup |",
        "|---|---|---|---|---|---|",
    ]
    with kernels_csv.open() as handle:
        for row in csv.DictReader(handle):
            lines.append(f"| {row['op']} | {row['shape']} | {row['max_abs_diff']} | "
                         f"{row['triton_ms']} | {row['torch_ms']} | {row['speedup']} |")
    lines += ["", "| kernels | sequences | decode step ms | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {row['backend']} | {row['sequences']} | {row['step_ms']} | {row['tokens_per_s']} |"
              for row in decode_rows]
    lines.append(SECTION_END)
    text = doc.read_text()
    if SECTION_START in text:
        before, _, rest = text.partition(SECTION_START)
        _, _, after = rest.partition(SECTION_END)
        text = before + "\n".join(lines) + after
    else:
        text = text.rstrip() + "\n\n## GPU kernels and decode\n\n" + "\n".join(lines) + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
