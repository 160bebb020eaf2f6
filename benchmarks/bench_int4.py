"""The Triton weight-only int4 matmul (`kernels.int4_matmul`) against a dense bf16 matmul
(`torch.nn.functional.linear`, cuBLAS) on the default model's projection shapes at 1, 32
and 256 rows: decode reads every weight once a step, so small batches should gain from a
quarter of the bytes. With --smoke, tiny shapes on CPU under TRITON_INTERPRET=1 (times
there only show that it ran)."""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# (name, out_features, in_features) of SmolLM2-135M's projections.
SHAPES = (("qkv", 960, 576), ("gate_up", 3072, 576), ("down", 576, 1536), ("lm_head", 49152, 576))
SMOKE_SHAPES = (("tiny", 40, 64),)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per case on CPU")
    args = parser.parse_args(argv)
    on_cuda = torch.cuda.is_available()
    if not on_cuda and not args.smoke:
        raise SystemExit("the int4 benchmark needs CUDA; use --smoke on CPU")
    if not on_cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO_ROOT))
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    from bench_kernels import report, time_ms

    import kernels
    from kernels.int4_matmul import GROUP_SIZE, pack_int4

    device = "cuda" if on_cuda else "cpu"
    dtype = torch.bfloat16
    rows_list = (1, 3, 17) if args.smoke else (1, 32, 256)
    results = []
    for name, out_features, in_features in SMOKE_SHAPES if args.smoke else SHAPES:
        groups = in_features // GROUP_SIZE
        packed = pack_int4(torch.randint(0, 16, (out_features, in_features))).to(device)
        scales = (torch.rand(out_features, groups) * 0.02).to(device, dtype)
        mins = ((torch.rand(out_features, groups) - 0.5) * 0.2).to(device, dtype)
        dense = kernels.int4_matmul_ref(
            torch.eye(in_features, device=device, dtype=dtype), packed, scales, mins
        ).T.contiguous()  # the same weight, dense: [N, K]
        for rows in rows_list:
            x = torch.randn(rows, in_features, device=device).to(dtype)
            int4 = kernels.int4_matmul(x, packed, scales, mins)
            worst = (int4.float() - torch.nn.functional.linear(x, dense).float()).abs().max()
            int4_ms = time_ms(partial(kernels.int4_matmul, x, packed, scales, mins), on_cuda,
                              args.repeats)
            bf16_ms = time_ms(partial(torch.nn.functional.linear, x, dense), on_cuda, args.repeats)
            results.append({
                "shape": f"{name} {out_features}x{in_features}", "rows": str(rows),
                "max_abs_diff": f"{worst.item():.3g}", "int4_ms": f"{int4_ms:.4f}",
                "bf16_ms": f"{bf16_ms:.4f}", "speedup": f"{bf16_ms / int4_ms:.2f}",
            })
    report(results, args.csv)
    return results


if __name__ == "__main__":
    main()
