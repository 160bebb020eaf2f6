"""Registers, spills and shared memory of every Triton kernel, compiled ahead of time for
sm_80 (A100) and sm_90 (H100) without a GPU, printed as a markdown table.

    python scripts/kernel_resources.py [--jobs 2]

The launches are those the launchers really make at two model shapes in bf16 and fp32
(scripts/kernel_launches.py). Each goes through triton's own argument binder, so the
alignment and divisibility specializations are those of a real launch, and is compiled to
a cubin for the target; ptxas's report (triton runs `ptxas -v`) gives registers and spills,
the compiled kernel's metadata the shared memory it asks for at launch.

Exits 1, listing what went wrong, when a kernel fails to compile, spills registers, needs
more registers or shared memory than one block may have on the target, or is never
launched. tests/kernels/test_gpu_compile.py runs it; docs/performance-log.md keeps its table.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import re
import sys
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from kernel_launches import DTYPES, SHAPES, RecordedLaunch  # noqa: E402


@dataclass(frozen=True, slots=True)
class Target:
    capability: int
    # The most shared memory one block may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin,
    # which triton checks a launch against: "out of resource: shared memory"). NVIDIA's CUDA
    # C++ Programming Guide, table "Technical Specifications per Compute Capability", row
    # "Maximum amount of shared memory per thread block": 163 KB for 8.0 and 227 KB for 9.0,
    # 1 KB under the 164 KB and 228 KB an SM can give shared memory, the rest "reserved for
    # system use" (its sections on shared memory for 8.x and 9.0; the same figures in the
    # Ampere and Hopper tuning guides, docs.nvidia.com/cuda/ampere-tuning-guide and
    # docs.nvidia.com/cuda/hopper-tuning-guide). 163 KiB = 166912 B, 227 KiB = 232448 B.
    max_shared_bytes: int
    multiprocessors: int  # the GPU's SM count, which the decode launcher sizes its splits by


TARGETS = {
    "sm_80": Target(80, 163 * 1024, multiprocessors=108),  # A100
    "sm_90": Target(90, 227 * 1024, multiprocessors=132),  # H100 SXM
}
# 64K 32-bit registers per block on both (the same table); ptxas caps a thread at 255.
MAX_REGISTERS_PER_BLOCK = 64 * 1024


@dataclass(slots=True)
class Resources:
    kernel: str
    launch: str
    target: str
    shape: str
    dtype: str
    tiles: str = ""
    num_warps: int = 0
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0
    error: str | None = None

    def problems(self) -> list[str]:
        where = f"{self.kernel} for {self.launch} on {self.target}, {self.shape} {self.dtype}"
        if self.error is not None:
            return [f"{where}: {self.error}"]
        found = []
        if self.spill_stores or self.spill_loads:
            stored, loaded = self.spill_stores, self.spill_loads
            found.append(f"{where}: spills {stored} B stored, {loaded} B loaded")
        limit = TARGETS[self.target].max_shared_bytes
        if self.shared_bytes > limit:
            found.append(f"{where}: {self.shared_bytes} B of shared memory, over {limit} B")
        if self.registers * 32 * self.num_warps > MAX_REGISTERS_PER_BLOCK:
            found.append(f"{where}: {self.registers} registers x {self.num_warps} warps per block")
        return found

    def cells(self) -> list[str]:
        if self.error is not None:
            return ["error", "-", "-"]
        spilled = self.spill_stores or self.spill_loads
        spills = f"{self.spill_stores}/{self.spill_loads} B" if spilled else "0"
        return [str(self.registers), spills, f"{self.shared_bytes / 1024:.1f} KiB"]


def compile_launch(launch: RecordedLaunch, target_name: str, base: Resources) -> Resources:
    """Compile one recorded launch for a target as JITFunction.run would, minus the device."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    gpu = GPUTarget("cuda", TARGETS[target_name].capability, 32)
    backend = make_backend(gpu)
    kernel = launch.kernel
    kwargs = dict(launch.kwargs)
    kwargs["debug"] = kwargs.get("debug", kernel.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options
    )
    base.tiles = " ".join(
        f"{name}={value}" for name, value in bound.items() if name.startswith("BLOCK_")
    )
    base.num_warps = options.num_warps
    report = io.StringIO()
    with contextlib.redirect_stdout(report):  # where triton prints ptxas's report
        compiled = triton.compile(
            ASTSource(kernel, signature, constexprs, attrs), target=gpu, options=options.__dict__
        )
    log = report.getvalue()
    registers = [int(found) for found in re.findall(r"Used (\d+) registers", log)]
    if not registers:
        raise RuntimeError(f"no register count in ptxas's report: {log[-500:]!r}")
    base.registers = max(registers)
    base.spill_stores = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", log))
    base.spill_loads = sum(int(n) for n in re.findall(r"(\d+) bytes spill loads", log))
    static_shared = sum(int(n) for n in re.findall(r"(\d+) bytes smem", log))
    base.shared_bytes = compiled.metadata.shared + static_shared
    return base


def compile_combination(target_name: str, shape_name: str, dtype_name: str) -> list[Resources]:
    """Record every launch at one shape and dtype, and compile each for one target."""
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
    from kernel_launches import record_launches, triton_kernels
    from triton import knobs

    knobs.nvidia.dump_ptxas_log = True
    # Every kernel through ptxas in this run: no earlier run's cache stands in for it.
    knobs.compilation.always_compile = True
    knobs.cache.dir = tempfile.mkdtemp(prefix="kernel-resources-")
    target = TARGETS[target_name]
    where = {"target": target_name, "shape": shape_name, "dtype": dtype_name}
    try:
        launches = record_launches(SHAPES[shape_name], DTYPES[dtype_name], target.multiprocessors)
    except Exception as error:
        return [Resources("-", "recording", error=f"{type(error).__name__}: {error}", **where)]
    rows = []
    for launch in launches:
        row = Resources(launch.kernel_name, launch.launch, **where)
        try:
            rows.append(compile_launch(launch, target_name, row))
        except Exception as error:  # every kernel is reported, not just the first failure
            row.error = f"{type(error).__name__}: {str(error)[:2000]}"
            rows.append(row)
    launched = {launch.kernel_name for launch in launches}
    rows += [
        Resources(name, "-", error="never launched by any example", **where)
        for name in triton_kernels()
        if name not in launched
    ]
    return rows


def measure(
    jobs: int,
    targets: list[str] | None = None,
    shapes: list[str] | None = None,
    dtypes: list[str] | None = None,
) -> list[Resources]:
    """Every (target, shape, dtype) combination asked for (all by default), spread over
    worker processes."""
    # Compiled, not interpreted: triton reads this when a kernel is defined, in the workers.
    os.environ.pop("TRITON_INTERPRET", None)
    combinations = [
        (target, shape, dtype)
        for target in targets or TARGETS
        for shape in shapes or SHAPES
        for dtype in dtypes or DTYPES
    ]
    context = multiprocessing.get_context("spawn")  # fresh interpreters, nothing inherited
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        results = pool.map(compile_combination, *zip(*combinations, strict=True))
        return [row for rows in results for row in rows]


def markdown(rows: list[Resources]) -> str:
    """One line per kernel, launch, shape and dtype; the targets' figures side by side."""
    header = ["kernel", "launch", "shape", "dtype", "tiles", "warps"]
    for target in TARGETS:
        header += [f"{target} regs", f"{target} spills", f"{target} smem"]
    grouped: dict[tuple[str, ...], dict[str, Resources]] = {}
    for row in rows:
        key = (row.kernel, row.launch, row.shape, row.dtype, row.tiles, str(row.num_warps))
        grouped.setdefault(key, {})[row.target] = row
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, per_target in grouped.items():
        cells = [f"`{key[0]}`", *key[1:4], f"`{key[4]}`" if key[4] else "", key[5]]
        for target in TARGETS:
            found = per_target.get(target)
            cells += found.cells() if found is not None else ["-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def toolchain() -> str:
    """The compilers the figures come from: they move with triton's version."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    assemblers = ", ".join(
        f"ptxas {get_ptxas(target.capability).version} for {name}"
        for name, target in TARGETS.items()
    )
    return f"triton {triton.__version__}, {assemblers}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--target", action="append", choices=list(TARGETS), help="default: all")
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="default: all")
    parser.add_argument("--dtype", action="append", choices=list(DTYPES), help="default: all")
    args = parser.parse_args(argv)
    rows = measure(max(1, args.jobs), args.target, args.shape, args.dtype)
    print(f"Compiled with {toolchain()}.\n")
    print(markdown(rows))
    problems = [problem for row in rows for problem in row.problems()]
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
