"""Per-op parity and timing of each Triton launcher against its torch reference: full
SmolLM2-135M sizes on CUDA (triton.testing.do_bench), or with --smoke tiny sizes on CPU
under TRITON_INTERPRET=1 (time.perf_counter; interpreter times only show that it ran)."""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (atol, rtol), the same as the kernel tests use.
TOLERANCES = dict(zip(DTYPES.values(), [(1e-4, 1e-4), (2e-3, 2e-3), (3e-2, 2e-2)], strict=True))


@dataclass
class BenchCase:
    op: str
    shape: str
    make_inputs: Callable[[], tuple]  # fresh inputs per call: several ops work in place
    compared: Callable[[tuple, object], tuple]  # the tensors that hold the op's result


def returned(inputs, result):
    return result if isinstance(result, tuple) else (result,)


def build_cases(device: str, dtype: torch.dtype, smoke: bool) -> list[BenchCase]:
    tokens, hidden, intermediate, vocab = (7, 96, 80, 300) if smoke else (4096, 576, 1536, 49152)
    q_heads, kv_heads, head_dim, block_size = 9, 3, 64, 16
    batch, max_context = (3, 40) if smoke else (32, 2048)
    long_context = 300 if smoke else 8192  # one long reasoning trace: the split-context path
    prefill_lens, prefix_len = ([5, 9], 7) if smoke else ([512] * 8, 512)

    def randn(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    def paged_cache(context_lens):
        blocks = [-(-length // block_size) for length in context_lens]
        shape = (sum(blocks), block_size, kv_heads, head_dim)
        order = torch.randperm(sum(blocks), device=device).to(torch.int32)
        tables = torch.zeros(len(context_lens), max(blocks), dtype=torch.int32, device=device)
        start = 0
        for seq, count in enumerate(blocks):
            tables[seq, :count] = order[start : start + count]
            start += count
        lens = torch.tensor(context_lens, dtype=torch.int32, device=device)
        return randn(*shape), randn(*shape), tables, lens

    generator = torch.Generator().manual_seed(0)
    decode_lens = torch.randint(1, max_context + 1, (batch,), generator=generator).tolist()
    decode_cache = paged_cache(decode_lens)
    long_cache = paged_cache([long_context])
    prefill_cache = paged_cache([length + prefix_len for length in prefill_lens])
    cu_seqlens = torch.tensor(
        [0, *torch.tensor(prefill_lens).cumsum(0).tolist()], dtype=torch.int32, device=device
    )
    cos_sin = torch.randn(8192, head_dim, device=device)
    scale = head_dim**-0.5

    def logits_inputs():
        counts = torch.randint(0, 3, (batch, vocab), device=device, dtype=torch.int32)
        forced = torch.full((batch,), -1, dtype=torch.int64, device=device)
        forced[0] = 5
        return (
            torch.randn(batch, vocab, device=device),
            counts,
            torch.rand(batch, vocab, device=device) < 0.05,
            torch.full((batch,), 0.3, device=device),
            torch.full((batch,), 0.2, device=device),
            torch.full((batch,), 1.1, device=device),
            torch.randn(batch, vocab, device=device),
            forced,
        )

    def kv_store_inputs():
        k_cache, v_cache = (torch.zeros_like(cache) for cache in decode_cache[:2])
        slots = torch.randperm(k_cache.shape[0] * block_size, device=device)[:tokens]
        k, v = randn(tokens, kv_heads, head_dim), randn(tokens, kv_heads, head_dim)
        return k, v, k_cache, v_cache, slots

    return [
        BenchCase(
            "rms_norm",
            f"T={tokens} H={hidden} +residual",
            lambda: (randn(tokens, hidden), randn(hidden), 1e-5, randn(tokens, hidden)),
            returned,
        ),
        BenchCase(
            "rotary_embedding",
            f"T={tokens} Hq={q_heads} Hk={kv_heads} D={head_dim}",
            lambda: (
                randn(tokens, q_heads, head_dim),
                randn(tokens, kv_heads, head_dim),
                torch.randint(0, 8192, (tokens,), device=device),
                cos_sin,
            ),
            lambda inputs, _: inputs[:2],
        ),
        BenchCase(
            "silu_and_mul",
            f"T={tokens} I={intermediate}",
            lambda: (randn(tokens, 2 * intermediate),),
            returned,
        ),
        BenchCase(
            "store_kv_cache",
            f"T={tokens} Hk={kv_heads} D={head_dim}",
            kv_store_inputs,
            lambda inputs, _: inputs[2:4],
        ),
        BenchCase(
            "paged_decode_attention",
            f"B={batch} ctx<={max_context} block={block_size}",
            lambda: (randn(batch, q_heads, head_dim), *decode_cache, scale),
            returned,
        ),
        BenchCase(
            "paged_decode_attention",
            f"B=1 ctx={long_context} block={block_size}",
            lambda: (randn(1, q_heads, head_dim), *long_cache, scale),
            returned,
        ),
        BenchCase(
            "prefill_attention",
            f"{len(prefill_lens)}x{prefill_lens[0]} new +{prefix_len} cached",
            lambda: (
                randn(sum(prefill_lens), q_heads, head_dim),
                *prefill_cache[:3],
                cu_seqlens,
                prefill_cache[3],
                scale,
            ),
            returned,
        ),
        BenchCase(
            "apply_logits_processors",
            f"B={batch} V={vocab}",
            logits_inputs,
            lambda inputs, _: inputs[:1],
        ),
    ]


def parity(case: BenchCase, ops_triton, ops_torch) -> tuple[float, bool]:
    """Largest abs difference between launcher and reference, and whether it is in tolerance."""
    torch.manual_seed(1)
    inputs = case.make_inputs()
    reference_inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)
    actual = case.compared(inputs, getattr(ops_triton, case.op)(*inputs))
    expected = case.compared(reference_inputs, getattr(ops_torch, case.op)(*reference_inputs))
    worst, within = 0.0, True
    for got, want in zip(actual, expected, strict=True):
        atol, rtol = TOLERANCES.get(want.dtype, TOLERANCES[torch.float32])
        finite = torch.isfinite(want)
        if not torch.equal(finite, torch.isfinite(got)):
            return float("inf"), False
        difference = (got.double() - want.double()).abs()[finite]
        if difference.numel():
            worst = max(worst, difference.max().item())
            within &= bool((difference <= atol + rtol * want.double().abs()[finite]).all())
    return worst, within


def time_ms(function: Callable[[], object], on_cuda: bool, repeats: int) -> float:
    if on_cuda:
        import triton.testing

        return float(triton.testing.do_bench(function))
    function()  # the interpreter's first call pays for setup
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats * 1e3


def run(csv_path: Path | None, smoke: bool, dtype_name: str, repeats: int) -> list[dict]:
    on_cuda = torch.cuda.is_available()
    if not on_cuda and not smoke:
        raise SystemExit("full-size kernel benchmarks need CUDA; use --smoke on CPU")
    if not on_cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of triton
    sys.path.insert(0, str(REPO_ROOT))
    import kernels

    ops_triton, ops_torch = kernels.get_ops("triton"), kernels.get_ops("torch")
    dtype = DTYPES[dtype_name]
    rows = []
    for case in build_cases("cuda" if on_cuda else "cpu", dtype, smoke):
        max_abs_diff, within = parity(case, ops_triton, ops_torch)
        inputs = case.make_inputs()
        triton_ms = time_ms(partial(getattr(ops_triton, case.op), *inputs), on_cuda, repeats)
        torch_ms = time_ms(partial(getattr(ops_torch, case.op), *inputs), on_cuda, repeats)
        device = "cuda" if on_cuda else "cpu-interpreter"
        rows.append(
            {"op": case.op, "shape": case.shape, "dtype": dtype_name, "device": device}
            | {"max_abs_diff": f"{max_abs_diff:.3g}", "parity": "ok" if within else "MISMATCH"}
            | {"triton_ms": f"{triton_ms:.4f}", "torch_ms": f"{torch_ms:.4f}"}
            | {"speedup": f"{torch_ms / triton_ms:.2f}"}
        )
    report(rows, csv_path)
    return rows


def report(rows: list[dict], csv_path: Path | None) -> None:
    """Print an aligned table and, when asked, write the same rows as CSV."""
    widths = {key: max(len(key), *(len(row[key]) for row in rows)) for key in rows[0]}
    print("  ".join(key.ljust(width) for key, width in widths.items()))
    for row in rows:
        print("  ".join(row[key].ljust(width) for key, width in widths.items()))
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with csv_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {csv_path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=None, help="where to write the results table")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes; runs on CPU under the interpreter"
    )
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default=None, help="bf16 on CUDA, fp32 otherwise"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per op on CPU")
    args = parser.parse_args(argv)
    dtype_name = args.dtype or ("bf16" if torch.cuda.is_available() else "fp32")
    rows = run(args.csv, args.smoke, dtype_name, args.repeats)
    return 0 if all(row["parity"] == "ok" for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
