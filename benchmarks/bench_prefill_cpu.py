"""What exact CPU prefill costs: `prefill_attention_ref` (each query attends as a decode
step would, so prefill and decode give a token the same bits) against one fused causal
`scaled_dot_product_attention` call over the same keys (what the CPU path ran before, with
bits of its own). One layer of the default model's shape (9 query heads, 3 KV heads, head
dim 64); the model has 30 such layers. Where the "cpu" backend's C++ ops build, their exact
prefill attention is timed too.

    .venv/bin/python benchmarks/bench_prefill_cpu.py [--tokens 430 1000] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 9, 3, 64, 16


def fused(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), keys.transpose(0, 1).unsqueeze(0),
        values.transpose(0, 1).unsqueeze(0), is_causal=True, scale=HEAD_DIM**-0.5,
        enable_gqa=True,
    )


def seconds(run, repeats: int) -> float:  # type: ignore[no-untyped-def]
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[430, 1000])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    rows = []
    for tokens in args.tokens:
        blocks = -(-tokens // BLOCK_SIZE)
        generator = torch.Generator().manual_seed(tokens)
        shape = (blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        k_cache = torch.randn(shape, generator=generator).to(dtype)
        v_cache = torch.randn(shape, generator=generator).to(dtype)
        q = torch.randn(tokens, Q_HEADS, HEAD_DIM, generator=generator).to(dtype)
        tables = torch.arange(blocks, dtype=torch.int32)[None]
        cu_seqlens_q = torch.tensor([0, tokens], dtype=torch.int32)
        context_lens = torch.tensor([tokens], dtype=torch.int32)
        keys = k_cache.flatten(0, 1)[:tokens]
        values = v_cache.flatten(0, 1)[:tokens]
        exact = seconds(partial(
            kernels.prefill_attention_ref, q, k_cache, v_cache, tables, cu_seqlens_q,
            context_lens, HEAD_DIM**-0.5,
        ), args.repeats)
        one_call = seconds(partial(fused, q, keys, values), args.repeats)
        row = {"tokens": tokens, "exact_ms": exact * 1e3, "fused_ms": one_call * 1e3}
        line = (f"{tokens} tokens, {args.dtype}, one layer: exact {row['exact_ms']:.1f} ms, "
                f"fused {row['fused_ms']:.1f} ms ({exact / one_call:.1f}x); "
                f"30 layers: {30 * exact:.2f} s against {30 * one_call:.2f} s")
        if kernels.cpu_ops.available():
            # The "cpu" backend's exact prefill: the same bits property, in C++.
            cpu_exact = seconds(partial(
                kernels.cpu_ops.prefill_attention, q, k_cache, v_cache, tables, cu_seqlens_q,
                context_lens, HEAD_DIM**-0.5,
            ), args.repeats)
            row["cpu_exact_ms"] = cpu_exact * 1e3
            line += f"; exact in the fused C++ op {row['cpu_exact_ms']:.1f} ms"
        rows.append(row)
        print(line, flush=True)
    return rows


if __name__ == "__main__":
    main()
