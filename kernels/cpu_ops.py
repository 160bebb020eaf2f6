"""The "cpu" backend: fused C++ ops for the CPU path (kernels/cpu/, one source file per op),
built once per machine with the system's C++ compiler and cached by torch's extension loader.

At one decode row the torch references spend more on dispatching their many small ATen
ops than on arithmetic; each op here is one call per layer. Every row is computed in one
fixed order by one thread, so a sequence's bits never depend on its batch or on the
thread count, and prefill attention runs each query through decode attention's routine,
so resuming a response on another worker stays exact (docs/reliability.md). Where the
extension cannot be built (no compiler), `available()` is False and "auto" picks the
torch backend instead. This module is the ops' one caller: the model reaches them
through the functions below.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from importlib import import_module
from pathlib import Path
from typing import Any

import torch

from kernels.dense_attention import check_sliding_window

SOURCE_DIR = Path(__file__).resolve().parent / "cpu"
# Every translation unit of the library; the headers beside them count toward its name.
SOURCES = sorted(SOURCE_DIR.glob("*.cpp"))
# -ffp-contract=off: no fused multiply-adds the source does not ask for, so a row's bits
# are the same whatever vector width the compiler picks for this machine. -fopenmp: an op
# called between torch's own (the bf16 path's attention) runs on at::parallel_for, which
# without it runs on one thread; the library then uses the OpenMP runtime torch has
# already loaded (the same soname). The decoder layers in one call and the quantized
# linears run on the ops' own threads instead (ChunkPool, kernels/cpu/chunk_pool.h).
# -fvisibility=hidden: the library's symbols stay its own, as another library built from
# the same sources (a test's) has its own pool.
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fvisibility=hidden"]
LDFLAGS = ["-fopenmp"]
LIBRARY = "spate_cpu"

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, object] = {}
# The op libraries this process has loaded, by name (load() holds _lock while it builds).
_loaded_libraries: set[str] = set()
_libraries_lock = threading.Lock()


def _cpu_signature(files: Sequence[Path], cflags: Sequence[str]) -> str:
    """What -march=native compiles for and every file the library is built from: a
    library built on another CPU (a shared cache, an image built elsewhere) or from other
    sources is rebuilt here rather than loaded."""
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
    digest = hashlib.sha256((flags + " ".join(cflags)).encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def library_files() -> list[Path]:
    """The sources and headers of kernels/cpu/, in a fixed order."""
    return sorted([*SOURCE_DIR.glob("*.cpp"), *SOURCE_DIR.glob("*.h")])


def build_library(
    prefix: str,
    sources: Sequence[Path],
    hashed: Sequence[Path],
    cflags: Sequence[str] = CFLAGS,
) -> str:
    """Compile `sources` into the op library `<prefix>_<hash of hashed files, flags and
    CPU>` and load it (its TORCH_LIBRARY registers the ops); the library's name.

    A process that finds the library built loads it; two that both need it build it
    once, one after the other (a file lock: torch's own `lock` file is left behind by a
    build that was killed, and would make every later build wait for it forever). The
    files are compiled from a copy in the build directory, so checkouts with the same
    sources at other paths find the library built rather than rebuild it in turn.
    """
    from torch.utils.cpp_extension import load as build

    _put_ninja_on_path()
    name = f"{prefix}_{_cpu_signature(hashed, cflags)}"
    with _libraries_lock:
        if name in _loaded_libraries:
            # Loaded once per process: a second load of the same ops would register their
            # namespace again, which aborts the process.
            return name
    directory = _build_directory(name)
    with _exclusive(directory / "build.lock"):
        # Holding the lock, no build of this library runs: a `lock` file is stale.
        (directory / "lock").unlink(missing_ok=True)
        copies = _copy_sources(directory / "src", [*hashed, *sources])
        build(
            name=name,
            sources=[str(copies[source]) for source in sources],
            extra_cflags=list(cflags),
            # Copies: torch's loader appends its own flags to the lists it is given, and a
            # list that grew would read as a changed build next time (a rebuilt library
            # under a new name, loaded beside the first).
            extra_ldflags=list(LDFLAGS),
            extra_include_paths=[str(directory / "src")],
            build_directory=str(directory),
            is_python_module=False,
            verbose=False,
        )
    with _libraries_lock:
        _loaded_libraries.add(name)
    return name


def _copy_sources(into: Path, files: Iterable[Path]) -> dict[Path, Path]:
    """Each file copied into `into` under its own name (left alone where the copy already
    holds its bytes, so its time stamp tells the build nothing changed): file -> copy."""
    into.mkdir(exist_ok=True)
    copies = {}
    for path in files:
        copy = into / path.name
        data = path.read_bytes()
        if not copy.is_file() or copy.read_bytes() != data:
            copy.write_bytes(data)
        copies[path] = copy
    return copies


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` for as long as the block runs; the kernel drops it when
    the process dies, so a killed build leaves no lock behind."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load() -> bool:
    """Build (first time on this machine) and load the ops; False, logged once, if that fails."""
    with _lock:
        if "loaded" in _state:
            return bool(_state["loaded"])
        if os.environ.get("SPATE_CPU_OPS", "1") == "0":
            _state["loaded"] = False
            _state["reason"] = "turned off by SPATE_CPU_OPS=0"
            return False
        try:
            log.info("loading the fused CPU ops (compiled the first time on a machine, "
                     "in about a minute)")
            name = build_library(LIBRARY, SOURCES, library_files())
            log.info("fused CPU ops %s loaded", name)
            _state["loaded"] = True
        except Exception as error:  # no compiler, no headers: the torch backend serves
            log.warning("fused CPU ops unavailable, using the torch backend: %s", error)
            _state["loaded"] = False
            _state["reason"] = build_failure(error)
        return bool(_state["loaded"])


def unavailable_reason() -> str | None:
    """Why the fused ops did not load (one line), once `load` has said they did not."""
    reason = _state.get("reason")
    return reason if isinstance(reason, str) else None


def build_failure(error: BaseException) -> str:
    """One line for a failed build: the compiler's first error (a missing header, say)
    rather than the build log torch's loader puts in its exception."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    compiler = [line for line in lines if "error:" in line]
    line = compiler[0] if compiler else (lines[0] if lines else type(error).__name__)
    return line if len(line) <= 300 else line[:297] + "..."


def _build_directory(name: str) -> Path:
    """Beside the environment's packages, so the library `make install` built is the one
    every process of this environment finds, whatever its HOME; torch's own cache
    (TORCH_EXTENSIONS_DIR, else ~/.cache) where that is set or not writable."""
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        directory = Path(sys.prefix) / "share" / "spate" / "cpu-ops" / name
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if os.access(directory, os.W_OK):
                return directory
        except OSError:
            pass
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(name, verbose=False))


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
    sliding_window: int | None = None,
) -> torch.Tensor:
    """As kernels.paged_decode_attention_ref; with a sliding window, blocks wholly before
    it are neither read nor checked."""
    check_sliding_window(sliding_window)
    out: torch.Tensor = torch.ops.spate_cpu.paged_decode_attention(
        q.contiguous(), k_cache, v_cache, block_tables.contiguous(), context_lens, scale,
        sliding_window,
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
    sliding_window: int | None = None,
) -> torch.Tensor:
    """As kernels.prefill_attention_ref: each query through decode attention's routine, so
    with its window too."""
    check_sliding_window(sliding_window)
    out: torch.Tensor = torch.ops.spate_cpu.prefill_attention(
        q.contiguous(), k_cache, v_cache, block_tables.contiguous(), cu_seqlens_q, context_lens,
        scale, sliding_window,
    )
    return out


def quantized_linear(
    x: torch.Tensor,
    codes: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor | None,
    bits: int,
    offset: int,
) -> torch.Tensor:
    """x [M, K] float32 times a GGUF weight [N, K] transposed, from its own groups of 32:
    codes (Q4: two a byte, stored as value + offset; Q8: int8), float32 scales [N, K / 32]
    and, for Q4_1, mins like them. [M, N] float32."""
    out: torch.Tensor = torch.ops.spate_cpu.quantized_linear(x, codes, scales, mins, bits, offset)
    return out


def quantized_weight(
    codes: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None, bits: int, offset: int
) -> torch.ScriptObject:
    """One linear's weight as `decoder_layers` holds it (the arguments of quantized_linear)."""
    weight: torch.ScriptObject = torch.classes.spate_cpu.QuantizedWeight(
        codes=codes, scales=scales, mins=mins, bits=bits, offset=offset
    )
    return weight


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """One decoder layer's weights for `decoder_stack`, named as workers/model/llama.py's
    modules name them (kernels/cpu/decoder_layers.h): the norms' weights, the linears'
    `quantized_weight`s, and its attention's sliding window (None: the whole context)."""

    input_layernorm: torch.Tensor
    qkv_proj: torch.ScriptObject
    o_proj: torch.ScriptObject
    post_attention_layernorm: torch.Tensor
    gate_up_proj: torch.ScriptObject
    down_proj: torch.ScriptObject
    sliding_window: int | None = None


def decoder_stack(
    layers: Iterable[LayerWeights],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    eps: float,
    scale: float,
) -> torch.ScriptObject:
    """A model's decoder layers, in order, as `decoder_layers` takes them."""
    stack: Any = torch.classes.spate_cpu.DecoderStack(
        num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, eps=eps, scale=scale
    )
    for layer in layers:
        stack.add_layer(**{field.name: getattr(layer, field.name) for field in fields(layer)})
    built: torch.ScriptObject = stack
    return built


def decoder_layers(
    stack: torch.ScriptObject,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    k_caches: list[torch.Tensor],
    v_caches: list[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden, residual) after every layer of `stack`, before the final norm: the calls
    workers/model/llama.py's modules make, in their order. A prefill passes cu_seqlens_q."""
    out: tuple[torch.Tensor, torch.Tensor] = torch.ops.spate_cpu.decoder_layers(
        stack, hidden, positions, slot_mapping, block_tables, context_lens, cu_seqlens_q,
        cos_sin_cache, k_caches, v_caches,
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
