"""The worker's compute ops: each a Triton kernel beside a plain-torch reference, picked as
a set by backend: "triton" on CUDA; on a CPU "cpu" (fused C++ ops for the hot ones,
kernels/cpu_ops.py, the references for the rest) where they build, else "torch"."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib import import_module
from typing import Any

import torch

from kernels import _launch, cpu_ops

BACKENDS = ("triton", "cpu", "torch")
# Each backend in words, as a worker reports it (its start line, /ready, its metrics).
BACKEND_OPS = {"triton": "Triton kernels", "cpu": "fused CPU ops", "torch": "torch ops"}


@dataclass(frozen=True, slots=True)
class KernelOps:
    """The ops the model and sampler call, all from one backend.

    Its fields after `backend` are the one list of op names: each names kernels/<op>.py,
    whose launcher `<op>` (Triton) or reference `<op>_ref` (torch) get_ops binds to it.
    A new kernel is a new module with that triad and a new field here.
    """

    backend: str
    rms_norm: Callable[..., Any]
    rotary_embedding: Callable[..., Any]
    silu_and_mul: Callable[..., Any]
    store_kv_cache: Callable[..., Any]
    paged_decode_attention: Callable[..., Any]
    prefill_attention: Callable[..., Any]
    apply_logits_processors: Callable[..., Any]
    moe_experts: Callable[..., Any]


OPS: tuple[str, ...] = tuple(field.name for field in fields(KernelOps) if field.name != "backend")
# Imported now, not on first use: triton decides whether to interpret a kernel when the
# kernel is defined (see _launch.INTERPRETING).
_MODULES = {op: import_module(f"kernels.{op}") for op in OPS}
# `kernels.<op>` is the op's launcher and `kernels.<op>_ref` its reference. Bound here
# because importing kernels/<op>.py made `kernels.<op>` that module.
for _op, _module in _MODULES.items():
    globals()[_op] = getattr(_module, _op)
    globals()[f"{_op}_ref"] = getattr(_module, f"{_op}_ref")


def resolve_backend(name: str = "auto") -> str:
    """Map "auto" | "triton" | "torch" to the backend this machine can run.

    "auto" picks triton when CUDA and triton are available, torch otherwise. "triton"
    without CUDA is allowed only under TRITON_INTERPRET=1 (set before importing triton),
    where kernels run on CPU tensors through triton's interpreter.
    """
    if name == "torch":
        return "torch"
    if name == "auto":
        usable = _launch.TRITON_IMPORT_ERROR is None and torch.cuda.is_available()
        return "triton" if usable else cpu_backend()
    if name == "cpu":
        if not cpu_ops.available():
            raise ValueError(
                "kernel backend 'cpu' needs its C++ ops, which did not build here (a C++ "
                "compiler is required; the log says why); use backend 'torch'"
            )
        return "cpu"
    if name != "triton":
        raise ValueError(f"unknown kernel backend {name!r}: expected auto, triton, cpu or torch")
    if _launch.TRITON_IMPORT_ERROR is not None:
        raise ValueError(
            f"kernel backend 'triton' needs the triton package: {_launch.TRITON_IMPORT_ERROR}"
        )
    if torch.cuda.is_available():
        return "triton"
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            "kernel backend 'triton' needs CUDA; on CPU set TRITON_INTERPRET=1 "
            "(slow, for testing) or use backend 'torch'"
        )
    if not _launch.INTERPRETING:
        raise ValueError(
            "TRITON_INTERPRET=1 was set after triton or kernels was imported; triton reads it "
            "when kernels are defined, so set it before the first import of either"
        )
    return "triton"


def cpu_backend() -> str:
    """What a model on the CPU runs: the fused C++ ops where they build, else the references."""
    return "cpu" if cpu_ops.available() else "torch"


def fallback_reason(requested: str, chosen: str, device_type: str) -> str | None:
    """Why a model on `device_type` runs `chosen` rather than the faster backend "auto"
    would pick on a machine where everything builds; None when nothing fell back (or
    `requested` named the backend itself)."""
    if requested != "auto":
        return None
    if device_type == "cuda" and chosen != "triton":
        return f"Triton kernels unavailable: {_launch.TRITON_IMPORT_ERROR}"
    if device_type != "cuda" and chosen == "torch":
        return f"fused CPU ops unavailable: {cpu_ops.unavailable_reason() or 'they did not load'}"
    return None


def get_ops(backend: str) -> KernelOps:
    """The op set for a backend ("triton", "cpu", "torch", or "auto", resolved first)."""
    backend = resolve_backend(backend)
    if backend == "cpu":
        bound = {
            op: getattr(cpu_ops, op) if op in cpu_ops.FUSED else getattr(_MODULES[op], op + "_ref")
            for op in OPS
        }
        return KernelOps(backend=backend, **bound)
    suffix = "" if backend == "triton" else "_ref"
    return KernelOps(
        backend=backend, **{op: getattr(_MODULES[op], op + suffix) for op in OPS}
    )


__all__ = [
    "BACKENDS", "BACKEND_OPS", "OPS", "KernelOps", "cpu_backend", "fallback_reason", "get_ops",
    "resolve_backend",
]
