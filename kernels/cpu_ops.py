"""The "cpu" backend: fused C++ ops for the CPU path (kernels/cpu/ops.cpp), built once per
machine with the system's C++ compiler and cached by torch's extension loader.

At one decode row the torch references spend more on dispatching their many small ATen
ops than on arithmetic; each op here is one call per layer. Every row is computed in one
fixed order by one thread, so a sequence's bits never depend on its batch or on the
thread count, and prefill attention runs each query through decode attention's routine,
so resuming a response on another worker stays exact (docs/reliability.md). Where the
extension cannot be built (no compiler), `available()` is False and "auto" picks the
torch backend instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import sys
import threading
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import torch

SOURCE = Path(__file__).resolve().parent / "cpu" / "ops.cpp"
# -ffp-contract=off: no fused multiply-adds the source does not ask for, so a row's bits
# are the same whatever vector width the compiler picks for this machine. -fopenmp: an op
# called between torch's own (the bf16 path's attention) runs on at::parallel_for, which
# without it runs on one thread; the library then uses the OpenMP runtime torch has
# already loaded (the same soname). The decoder layers in one call and the quantized
# linears run on the ops' own threads instead (ChunkPool in ops.cpp).
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]
LDFLAGS = ["-fopenmp"]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, object] = {}


def _cpu_signature() -> str:
    """What -march=native compiles for: a library built on another CPU (a shared cache,
    an image built elsewhere) is rebuilt here rather than loaded."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "model name")):
                    flags += line
                if line.startswith("flags"):
                    break
    except OSError:
        flags = platform.processor()
    digest = hashlib.sha256((flags + SOURCE.read_text() + " ".join(CFLAGS)).encode())
    return digest.hexdigest()[:12]


def load() -> bool:
    """Build (first time on this machine) and load the ops; False, logged once, if that fails."""
    with _lock:
        if "loaded" in _state:
            return bool(_state["loaded"])
        if os.environ.get("SPATE_CPU_OPS", "1") == "0":
            _state["loaded"] = False
            return False
        try:
            from torch.utils.cpp_extension import load as build

            _put_ninja_on_path()
            name = f"spate_cpu_{_cpu_signature()}"
            log.info("loading the fused CPU ops %s (compiled the first time on a machine, "
                     "in about 20 s)", name)
            build(
                name=name,
                sources=[str(SOURCE)],
                extra_cflags=CFLAGS,
                extra_ldflags=LDFLAGS,
                build_directory=_build_directory(name),
                is_python_module=False,
                verbose=False,
            )
            _state["loaded"] = True
        except Exception as error:  # no compiler, no headers: the torch backend serves
            log.warning("fused CPU ops unavailable, using the torch backend: %s", error)
            _state["loaded"] = False
        return bool(_state["loaded"])


def _build_directory(name: str) -> str | None:
    """Beside the environment's packages, so the library `make install` built is the one
    every process of this environment finds, whatever its HOME; torch's own cache
    (TORCH_EXTENSIONS_DIR, else ~/.cache) where that is set or not writable."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return None
    directory = Path(sys.prefix) / "share" / "spate" / "cpu-ops" / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(directory) if os.access(directory, os.W_OK) else None


def _put_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; the one the `ninja` package installed sits
    beside this interpreter, which a venv's scripts run without putting on PATH."""
    directories = [str(Path(sys.executable).parent)]
    try:
        import ninja

        directories.insert(0, ninja.BIN_DIR)
    except ImportError:
        pass
    path = os.environ.get("PATH", "").split(os.pathsep)
    missing = [directory for directory in directories if directory not in path]
    if missing:
        os.environ["PATH"] = os.pathsep.join([*missing, *path])


def available() -> bool:
    return load()


def _reference(op: str) -> Callable[..., Any]:
    """The torch reference of `op`, for inputs these ops do not take."""
    reference: Callable[..., Any] = getattr(import_module(f"kernels.{op}"), f"{op}_ref")
    return reference


def _fits(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """As kernels.rms_norm_ref, with the residual kept in fp32."""
    if residual is not None and not (residual.dtype == torch.float32 and _fits(residual)):
        return _reference("rms_norm")(x, weight, eps, residual)  # type: ignore[no-any-return]
    out: torch.Tensor
    residual_out: torch.Tensor
    out, residual_out = torch.ops.spate_cpu.rms_norm(x.contiguous(), weight, eps, residual)
    return out if residual is None else (out, residual_out)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = torch.ops.spate_cpu.silu_and_mul(x.contiguous())
    return out


def store_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """As kernels.store_kv_cache_ref: each token's k and v to its slot, slot -1 skipped."""
    if not _fits(k_cache, v_cache):
        _reference("store_kv_cache")(k, v, k_cache, v_cache, slot_mapping)
        return
    torch.ops.spate_cpu.store_kv_cache(
        k.contiguous(), v.contiguous(), k_cache, v_cache, slot_mapping
    )


def rotary_embedding(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    if not _fits(q, k, cos_sin_cache):
        _reference("rotary_embedding")(q, k, positions, cos_sin_cache)
        return
    torch.ops.spate_cpu.rotary_embedding(q, k, positions, cos_sin_cache)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    out: torch.Tensor = torch.ops.spate_cpu.paged_decode_attention(
        q.contiguous(), k_cache, v_cache, block_tables.contiguous(), context_lens, scale
    )
    return out


def prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    out: torch.Tensor = torch.ops.spate_cpu.prefill_attention(
        q.contiguous(), k_cache, v_cache, block_tables.contiguous(), cu_seqlens_q, context_lens, scale
    )
    return out


# The ops this backend replaces; the rest come from the torch references.
FUSED = (
    "rms_norm",
    "silu_and_mul",
    "store_kv_cache",
    "rotary_embedding",
    "paged_decode_attention",
    "prefill_attention",
)
