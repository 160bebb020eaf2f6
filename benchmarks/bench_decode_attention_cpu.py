"""What one decode step's attention costs on the CPU: the fused C++ op against the torch
path's decode attention (`kernels.paged_decode_attention_ref`), both over the default
model's shape (9 query heads, 3 KV heads, head dim 64, blocks of 16) in float32, the
worker's cache dtype on CPU.

A step runs the op once per layer, and each layer's keys and values sit in blocks of
their own: the cache here holds `--layers` layers' worth (30, the model's), each layer's
block tables a random draw of them, so a step reads its cache from memory as a served one
does rather than from a cache level that one layer's worth would fit in. Prints
milliseconds per step (every layer once) for each batch size and context length (batches
whose contexts add up to more than --max-positions are skipped).

    .venv/bin/python benchmarks/bench_decode_attention_cpu.py [--batch 1 8 32]
        [--context 170 1000 4000] [--layers 30] [--repeats 5] [--max-positions 64000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402
from benchmarks.bench_prefill_cpu import seconds  # noqa: E402

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 9, 3, 64, 16
SCALE = HEAD_DIM**-0.5


def step_ms(attend, q, k_cache, v_cache, tables, context_lens, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """Median milliseconds of one step: every layer's attention once."""

    def step() -> None:
        for layer_tables in tables:
            attend(q, k_cache, v_cache, layer_tables, context_lens, SCALE)

    return 1e3 * seconds(step, repeats)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--context", type=int, nargs="+", default=[170, 1000, 4000])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-positions", type=int, default=64_000,
                        help="skip a batch whose contexts add up to more (its cache's memory)")
    args = parser.parse_args(argv)
    fused = kernels.cpu_ops.available()
    print(f"{torch.get_num_threads()} threads, {args.layers} layers a step, float32; "
          f"fused op {'built' if fused else 'unavailable: torch path alone'}")
    print("| sequences | context | fused op ms/step | torch path ms/step | ratio |")
    print("|---|---|---|---|---|")
    rows = []
    for context in args.context:
        for batch in args.batch:
            if batch * context > args.max_positions:
                continue
            blocks = -(-context // BLOCK_SIZE)
            generator = torch.Generator().manual_seed(batch * 100_003 + context)
            total = args.layers * batch * blocks
            shape = (total, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
            k_cache = torch.randn(shape, generator=generator)
            v_cache = torch.randn(shape, generator=generator)
            order = torch.randperm(total, generator=generator).to(torch.int32)
            tables = list(order.view(args.layers, batch, blocks))
            q = torch.randn(batch, Q_HEADS, HEAD_DIM, generator=generator)
            context_lens = torch.full((batch,), context, dtype=torch.int32)
            row = {"batch": batch, "context": context}
            row["torch_ms"] = step_ms(kernels.paged_decode_attention_ref, q, k_cache, v_cache,
                                      tables, context_lens, args.repeats)
            line = f"| {batch} | {context} | "
            if fused:
                row["fused_ms"] = step_ms(kernels.cpu_ops.paged_decode_attention, q, k_cache,
                                          v_cache, tables, context_lens, args.repeats)
                line += (f"{row['fused_ms']:.2f} | {row['torch_ms']:.2f} | "
                         f"{row['torch_ms'] / row['fused_ms']:.2f}x |")
            else:
                line += f"- | {row['torch_ms']:.2f} | - |"
            print(line, flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
