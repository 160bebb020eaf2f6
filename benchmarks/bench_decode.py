"""Decode step time and tokens per second of the engine at several batch sizes, with
`--kernels triton` against `--kernels torch`, on one model and device.

    .venv/bin/python benchmarks/bench_decode.py --csv benchmarks/results/decode.csv
    .venv/bin/python benchmarks/bench_decode.py --smoke     # CPU, Triton interpreter, tiny model
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.bench_engine import decode_throughput, prompts  # noqa: E402
from workers.engine import EngineConfig, LLMEngine  # noqa: E402
from workers.model import DEFAULT_MODEL, load_model  # noqa: E402

BACKENDS = ("torch", "triton")


def measure(model: str, device: str, dtype: torch.dtype, concurrencies: list[int],
            steps: int, warmup_steps: int, windows: int = 3) -> list[dict[str, object]]:
    rows = []
    for backend in BACKENDS:
        loaded = load_model(model, device=device, dtype=dtype, backend=backend)
        engine = LLMEngine(loaded, EngineConfig(
            kernels=backend, max_num_seqs=max(concurrencies),
            num_kv_blocks=max(concurrencies) * 8 + 16,
        ))
        for concurrency in concurrencies:
            # The best of a few windows: one window can land on another process's busy moment.
            tokens_per_s = max(decode_throughput(
                engine, prompts(loaded, concurrency), warmup_steps, steps, windows
            ))
            rows.append({
                "backend": backend, "sequences": concurrency,
                "step_ms": round(1000 * concurrency / tokens_per_s, 3),
                "tokens_per_s": round(tokens_per_s, 1),
            })
            print(f"{backend:>6} | {concurrency:4d} seqs | step {rows[-1]['step_ms']:9.2f} ms | "
                  f"{tokens_per_s:10.1f} tokens/s", flush=True)
        del engine, loaded
    return rows


def speedups(rows: list[dict[str, object]]) -> dict[int, float]:
    by_key = {(row["backend"], row["sequences"]): row for row in rows}
    return {
        sequences: float(by_key[("triton", sequences)]["tokens_per_s"])  # type: ignore[arg-type]
        / float(by_key[("torch", sequences)]["tokens_per_s"])  # type: ignore[arg-type]
        for (backend, sequences) in by_key if backend == "torch"
    }


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny random checkpoint, 2 sequences, 2 steps (CPU, interpreter)")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = args.model
    if args.smoke:
        from harness.tiny_checkpoint import write_tiny_checkpoint

        model = tempfile.mkdtemp(prefix="spate-tiny-")
        write_tiny_checkpoint(Path(model), "qwen3", seed=1)
        args.concurrency, args.steps, args.warmup_steps = [1, 2], 2, 1
    rows = measure(model, device, dtype, args.concurrency, args.steps, args.warmup_steps,
                   windows=1 if args.smoke else 3)
    for sequences, ratio in speedups(rows).items():
        print(f"triton / torch at {sequences} sequences: {ratio:.2f}x")
    if args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
