"""The worker's compute ops: each a Triton kernel beside a plain-torch reference, picked as
a set by backend ("triton" on CUDA, "torch" on CPU)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import _launch
from kernels.apply_logits_processors import apply_logits_processors, apply_logits_processors_ref
from kernels.paged_decode_attention import paged_decode_attention, paged_decode_attention_ref
from kernels.prefill_attention import prefill_attention, prefill_attention_ref
from kernels.rms_norm import rms_norm, rms_norm_ref
from kernels.rotary_embedding import rotary_embedding, rotary_embedding_ref
from kernels.silu_and_mul import silu_and_mul, silu_and_mul_ref
from kernels.store_kv_cache import store_kv_cache, store_kv_cache_ref

BACKENDS = ("triton", "torch")


@dataclass(frozen=True, slots=True)
class KernelOps:
    """The seven ops the model and sampler call, all from one backend."""

    backend: str
    rms_norm: Callable
    rotary_embedding: Callable
    silu_and_mul: Callable
    store_kv_cache: Callable
    paged_decode_attention: Callable
    prefill_attention: Callable
    apply_logits_processors: Callable


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
        return "triton" if usable else "torch"
    if name != "triton":
        raise ValueError(f"unknown kernel backend {name!r}: expected auto, triton or torch")
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


def get_ops(backend: str) -> KernelOps:
    """The op set for a backend ("triton", "torch", or "auto", resolved first)."""
    backend = resolve_backend(backend)
    if backend == "triton":
        return KernelOps(
            backend="triton",
            rms_norm=rms_norm,
            rotary_embedding=rotary_embedding,
            silu_and_mul=silu_and_mul,
            store_kv_cache=store_kv_cache,
            paged_decode_attention=paged_decode_attention,
            prefill_attention=prefill_attention,
            apply_logits_processors=apply_logits_processors,
        )
    return KernelOps(
        backend="torch",
        rms_norm=rms_norm_ref,
        rotary_embedding=rotary_embedding_ref,
        silu_and_mul=silu_and_mul_ref,
        store_kv_cache=store_kv_cache_ref,
        paged_decode_attention=paged_decode_attention_ref,
        prefill_attention=prefill_attention_ref,
        apply_logits_processors=apply_logits_processors_ref,
    )


__all__ = [
    "BACKENDS",
    "KernelOps",
    "get_ops",
    "resolve_backend",
    "apply_logits_processors",
    "apply_logits_processors_ref",
    "paged_decode_attention",
    "paged_decode_attention_ref",
    "prefill_attention",
    "prefill_attention_ref",
    "rms_norm",
    "rms_norm_ref",
    "rotary_embedding",
    "rotary_embedding_ref",
    "silu_and_mul",
    "silu_and_mul_ref",
    "store_kv_cache",
    "store_kv_cache_ref",
]
