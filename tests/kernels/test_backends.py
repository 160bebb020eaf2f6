"""kernels.get_ops and kernels.resolve_backend: which implementations a backend name binds."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels

REPO_ROOT = Path(__file__).resolve().parents[2]
OP_NAMES = kernels.OPS


@pytest.mark.parametrize("op", OP_NAMES)
def test_each_op_is_a_module_holding_its_triad(op):
    module = importlib.import_module(f"kernels.{op}")
    for name in (f"_{op}_kernel", op, f"{op}_ref"):
        assert callable(getattr(module, name, None)), f"kernels/{op}.py lacks {name}"


def test_torch_backend_binds_the_references():
    ops = kernels.get_ops("torch")
    assert ops.backend == "torch"
    for name in OP_NAMES:
        assert getattr(ops, name) is getattr(kernels, f"{name}_ref")


def test_triton_backend_binds_the_launchers(triton_ops):
    assert triton_ops.backend == "triton"
    for name in OP_NAMES:
        assert getattr(triton_ops, name) is getattr(kernels, name)


def test_auto_picks_triton_only_with_cuda():
    expected = "triton" if torch.cuda.is_available() else kernels.cpu_backend()
    assert kernels.resolve_backend("auto") == expected
    assert kernels.get_ops("auto").backend == expected


def test_cpu_backend_binds_the_fused_ops_and_references_for_the_rest():
    if not kernels.cpu_ops.available():
        pytest.skip("the fused CPU ops did not build on this machine")
    ops = kernels.get_ops("cpu")
    assert ops.backend == "cpu"
    for name in OP_NAMES:
        expected = (
            getattr(kernels.cpu_ops, name)
            if name in kernels.cpu_ops.FUSED
            else getattr(kernels, f"{name}_ref")
        )
        assert getattr(ops, name) is expected


def test_without_the_fused_ops_a_cpu_model_runs_the_references():
    script = (
        "import kernels\n"
        "assert not kernels.cpu_ops.available()\n"
        "assert kernels.cpu_backend() == 'torch'\n"
        "assert kernels.get_ops('auto').backend in ('torch', 'triton')\n"
        "try:\n"
        "    kernels.resolve_backend('cpu')\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), SPATE_CPU_OPS="0")
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "refused: kernel backend 'cpu' needs its C++ ops" in result.stdout


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown kernel backend"):
        kernels.resolve_backend("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA makes the triton backend valid")
def test_triton_without_cuda_needs_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        kernels.resolve_backend("triton")


def test_torch_path_works_without_triton_installed():
    # A None entry in sys.modules makes `import triton` raise ImportError, as if uninstalled.
    script = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, kernels\n"
        "ops = kernels.get_ops('auto')\n"
        "assert ops.backend == kernels.cpu_backend(), ops.backend\n"
        "print(ops.silu_and_mul(torch.ones(2, 4)).shape)\n"
        "try:\n"
        "    kernels.silu_and_mul(torch.ones(2, 4))\n"
        "except ValueError as error:\n"
        "    print('launcher refused:', error)\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    environment.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "torch.Size([2, 2])" in result.stdout
    assert "launcher refused: the triton backend needs the `triton` package" in result.stdout
