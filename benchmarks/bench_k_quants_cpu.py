"""bench_k_quants_cpu: one projection's time on the fused op's K-quant super-blocks against
the dense weights a K-quant file was expanded to before (oneDNN prepacked, float32 and,
where the CPU has native bf16, bfloat16), at a decode shape and a prefill shape.

    .venv/bin/python -m benchmarks.bench_k_quants_cpu --rows 1 64 --out 4096 --in 1536
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from benchmarks.bench_prefill_cpu import seconds
from kernels import cpu_ops
from workers.model.cpu_linear import PrepackedLinear, prepacking_available
from workers.model.k_quants import BLOCK_BYTES, KQuantized
from workers.model.quantized_linear import GroupLinear


def random_k_quant(kind: str, rows: int, columns: int) -> KQuantized:
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (rows, columns // 256, BLOCK_BYTES[kind]), dtype=np.uint8)
    for start in (208,) if kind == "Q6_K" else (0, 2):
        d = rng.uniform(1e-4, 1e-2, (rows, columns // 256)).astype(np.float16)
        blocks[..., start : start + 2] = d[..., None].view(np.uint8)
    return KQuantized(kind, torch.from_numpy(blocks.reshape(rows, -1)), columns)


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--out", type=int, default=4096)
    parser.add_argument("--in", dest="columns", type=int, default=1536)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if not cpu_ops.available():
        raise SystemExit("the fused CPU ops did not build here")
    results: list[dict[str, object]] = []
    for kind in ("Q4_K", "Q5_K", "Q6_K"):
        weight = random_k_quant(kind, args.out, args.columns)
        linears: dict[str, torch.nn.Module] = {kind: GroupLinear(weight, None)}
        dense = weight.dequantize()
        for dtype in (torch.float32, torch.bfloat16):
            if prepacking_available(torch.device("cpu"), dtype):
                linears[f"dense {str(dtype).removeprefix('torch.')}"] = PrepackedLinear(
                    dense.to(dtype), None, batch_hint=32
                )
        for rows in args.rows:
            x = torch.randn(rows, args.columns)
            with torch.inference_mode():
                for name, linear in linears.items():
                    taken = seconds(lambda linear=linear, x=x: linear(x), args.repeats)
                    results.append({"kind": kind, "path": name, "rows": rows, "us": taken * 1e6})
                    print(f"{kind} [{args.out}x{args.columns}] rows={rows:4d} {name:15s} "
                          f"{taken * 1e6:9.1f} us")
    return results


if __name__ == "__main__":
    main()
