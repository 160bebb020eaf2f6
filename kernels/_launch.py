"""What every launcher needs: the optional triton import (kernel modules decorate against it,
so the torch references work without triton) and the argument checks on shapes, dtypes,
strides and devices."""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import SimpleNamespace

import torch

try:
    import triton
    import triton.language as tl

    TRITON_IMPORT_ERROR: ImportError | None = None
except ImportError as error:  # the torch references must keep working without triton
    TRITON_IMPORT_ERROR = error
    # Stand-ins that let `@triton.jit` and `tl.constexpr` annotations evaluate at import time.
    # Launchers call require_triton() first, so these are never launched.
    triton = SimpleNamespace(jit=lambda fn=None, **_: fn if fn is not None else (lambda f: f))
    tl = SimpleNamespace(constexpr=object)


def _interpreting() -> bool:
    """Whether kernels defined now will run under triton's interpreter.

    triton chooses between compiling and interpreting when a function is decorated, for its
    own library (tl.sum, ...) at `import triton` and for ours at `import kernels`; the
    interpreter works only if TRITON_INTERPRET=1 was set before both.
    """
    if TRITON_IMPORT_ERROR is not None or os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return False
    return isinstance(tl.sum, InterpretedFunction)


INTERPRETING = _interpreting()


def require_triton() -> None:
    """Raise a clear error when a Triton launcher is called where triton is missing."""
    if TRITON_IMPORT_ERROR is not None:
        raise ValueError(
            "the triton backend needs the `triton` package "
            f"(pip install 'spate[kernels]'): {TRITON_IMPORT_ERROR}"
        )


FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(
    name: str,
    tensor: object,
    *,
    ndim: int,
    dtypes: Iterable[torch.dtype],
    inner_contiguous: bool = True,
) -> torch.Tensor:
    """Check rank and dtype, and that the last dim is unit-stride (kernels index it directly)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(tensor.shape)}")
    allowed = tuple(dtypes)
    if tensor.dtype not in allowed:
        names = ", ".join(str(dtype) for dtype in allowed)
        raise ValueError(f"{name} must have dtype in ({names}), got {tensor.dtype}")
    if inner_contiguous and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(
            f"{name} must be contiguous in its last dim, got strides {tensor.stride()}"
        )
    return tensor


def check_shape(name: str, tensor: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name} must have shape {expected}, got {tuple(tensor.shape)}")


def check_contiguous(name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tensor.stride()}")


def check_launchable(**tensors: torch.Tensor | None) -> None:
    """All tensors on one device, and that device one Triton can run on."""
    require_triton()
    present = {name: tensor for name, tensor in tensors.items() if tensor is not None}
    devices = {tensor.device for tensor in present.values()}
    if len(devices) > 1:
        placed = ", ".join(f"{name} on {tensor.device}" for name, tensor in present.items())
        raise ValueError(f"tensors must share one device: {placed}")
    device = devices.pop()
    if device.type == "cuda":
        # triton launches on the current device, whatever the tensors' device says.
        current = torch.cuda.current_device()
        if device.index is not None and device.index != current:
            raise ValueError(
                f"tensors are on {device} but the current CUDA device is cuda:{current}; "
                "call torch.cuda.set_device first"
            )
        return
    if device.type == "cpu" and INTERPRETING:
        return
    raise ValueError(
        f"Triton kernels need CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set "
        f"before importing triton), got {device}"
    )


def check_paged_cache(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor
) -> tuple[int, int]:
    """Check a paged cache pair against q[..., Hq, D]; return (block_size, num_kv_heads)."""
    head_dim = q.shape[-1]
    num_q_heads = q.shape[-2]
    check_tensor("k_cache", k_cache, ndim=4, dtypes=(q.dtype,))
    check_tensor("v_cache", v_cache, ndim=4, dtypes=(q.dtype,))
    check_shape("v_cache", v_cache, tuple(k_cache.shape))
    _, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"cache head dim {cache_head_dim} differs from q's head dim {head_dim}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"query heads ({num_q_heads}) must be a multiple of KV heads ({num_kv_heads})"
        )
    if k_cache.stride() != v_cache.stride():
        raise ValueError("k_cache and v_cache must share one layout (strides)")
    check_tensor("block_tables", block_tables, ndim=2, dtypes=(torch.int32,))
    return block_size, num_kv_heads


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 attention keeps full precision (no tf32) so it matches the fp32 reference."""
    return "ieee" if dtype == torch.float32 else "tf32"


def upcast_dot_inputs(dtype: torch.dtype) -> bool:
    """triton's interpreter multiplies bf16 tiles as their raw uint16 bits in tl.dot, so
    under it the kernels widen dot inputs to fp32 (after rounding, so results match)."""
    return INTERPRETING and dtype == torch.bfloat16
