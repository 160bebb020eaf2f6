"""Every kernel compiles for a Hopper GPU (through PTX to a cubin), checked without a GPU.

The interpreter accepts things the real compiler rejects, so this file doubles as a script
that the test runs in a fresh process without TRITON_INTERPRET: each launcher runs on small
CPU tensors with its kernel swapped for a recorder, and the recorded call is compiled for
sm_90, so the signatures compiled are exactly the ones the launchers pass.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
# Per dtype (fp32, bf16): the seven ops, plus split decode's two kernels.
EXPECTED_COMPILES = 2 * (7 + 2)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_every_kernel_compiles_for_sm90():
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, __file__], env=environment, capture_output=True, text=True, timeout=240
    )
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert result.returncode == 0 and not failed, "\n".join(failed) or result.stderr[-3000:]
    assert result.stdout.count("ok ") == EXPECTED_COMPILES, result.stdout


LAUNCH_OPTIONS = ("num_warps", "num_stages")


class LaunchRecorder:
    """Stands in for a kernel: `kernel[grid](*args, **kwargs)` records the call."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def launch_examples(dtype):
    """One small call per op, in the shapes the model uses (9 query / 3 KV heads, D=64),
    and a decode whose block table is long enough to be split across programs."""
    cache = torch.zeros(4, 16, 3, 64, dtype=dtype)
    tables = torch.zeros(2, 4, dtype=torch.int32)
    lens = torch.tensor([5, 9], dtype=torch.int32)
    long_tables = torch.zeros(2, 64, dtype=torch.int32)
    return {
        "rms_norm": (
            torch.zeros(3, 576, dtype=dtype),
            torch.ones(576, dtype=dtype),
            1e-5,
            torch.zeros(3, 576, dtype=dtype),
        ),
        "rotary_embedding": (
            torch.zeros(3, 9, 64, dtype=dtype),
            torch.zeros(3, 3, 64, dtype=dtype),
            torch.zeros(3, dtype=torch.int64),
            torch.zeros(8, 64),
        ),
        "silu_and_mul": (torch.zeros(3, 3072, dtype=dtype),),
        "store_kv_cache": (
            torch.zeros(3, 3, 64, dtype=dtype),
            torch.zeros(3, 3, 64, dtype=dtype),
            cache,
            cache.clone(),
            torch.zeros(3, dtype=torch.int64),
        ),
        "paged_decode_attention": (
            torch.zeros(2, 9, 64, dtype=dtype),
            cache,
            cache,
            tables,
            lens,
            0.125,
        ),
        "paged_decode_attention split": (
            torch.zeros(2, 9, 64, dtype=dtype),
            cache,
            cache,
            long_tables,
            lens,
            0.125,
        ),
        "prefill_attention": (
            torch.zeros(6, 9, 64, dtype=dtype),
            cache,
            cache,
            tables,
            torch.tensor([0, 2, 6], dtype=torch.int32),
            lens,
            0.125,
        ),
        "apply_logits_processors": (
            torch.zeros(2, 300),
            torch.zeros(2, 300, dtype=torch.int32),
            torch.zeros(2, 300, dtype=torch.bool),
            torch.zeros(2),
            torch.zeros(2),
            torch.ones(2),
            torch.zeros(2, 300),
            torch.full((2,), -1),
        ),
    }


def compile_recorded(kernel, args, kwargs):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import mangle_type

    names = kernel.arg_names
    # Launchers pass constexprs by keyword, so args can be shorter than names.
    bound = dict(zip(names, args, strict=False)) | {
        k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS
    }
    constexpr_names = {names[param.num] for param in kernel.params if param.is_constexpr}
    signature = {
        name: "constexpr" if name in constexpr_names else mangle_type(bound[name]) for name in names
    }
    constexprs = {(names.index(name),): bound[name] for name in constexpr_names}
    options = {key: kwargs[key] for key in LAUNCH_OPTIONS if key in kwargs}
    triton.compile(
        ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32), options=options
    )


def main() -> int:
    splits_module = importlib.import_module("kernels.context_splits")
    failures = 0
    for dtype in (torch.float32, torch.bfloat16):
        for label, args in launch_examples(dtype).items():
            op = label.split()[0]
            modules = [importlib.import_module(f"kernels.{op}"), splits_module]
            originals = [dict(vars(module)) for module in modules]
            recorders = {}
            for module in modules:
                # CPU tensors are fine: nothing is launched, only the arguments are recorded.
                module.check_launchable = lambda **_: None
                for name in [name for name in vars(module) if name.endswith("_kernel")]:
                    recorders[name] = (getattr(module, name), LaunchRecorder())
                    setattr(module, name, recorders[name][1])
            try:
                getattr(modules[0], op)(*args)
                for name, (kernel, recorder) in recorders.items():
                    for call in recorder.calls:
                        compile_recorded(kernel, *call)
                        print(f"ok {label} {name} {dtype}")
            except Exception as error:  # report every kernel, not just the first failure
                failures += 1
                print(f"FAILED {label} {dtype}: {type(error).__name__}: {error}")
            finally:
                for module, original in zip(modules, originals, strict=True):
                    module.__dict__.update(original)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    raise SystemExit(main())
