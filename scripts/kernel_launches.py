"""The launches a model really makes, recorded on CPU tensors without running a kernel:
what scripts/kernel_resources.py compiles ahead of time.

Each launcher in kernels/ is called on small tensors in a model's own layout (its head
counts, head dim, hidden and intermediate sizes, vocabulary, the engine's 16-token cache
blocks) with every `*_kernel` swapped for a recorder, so the arguments compiled are the
very ones the launcher passes: its tile sizes, warps and stages, its strides, its dtypes.
Nothing here needs a GPU or triton's interpreter.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

import torch

CACHE_BLOCK_SIZE = 16  # the engine's default (workers/engine/config.py)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int


SHAPES = {
    "SmolLM2-135M": ModelShape(9, 3, 64, 576, 1536, 49152),
    "Llama-3-8B": ModelShape(32, 8, 128, 4096, 14336, 128256),
}


@dataclass(frozen=True, slots=True)
class RecordedLaunch:
    launch: str  # which call of which launcher made it, e.g. "paged_decode_attention (split)"
    kernel_name: str
    kernel: Any  # the triton JITFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def launch_examples(shape: ModelShape, dtype: torch.dtype) -> dict[str, tuple[str, tuple]]:
    """label -> (op, its arguments): every kind of call the engine makes, one of each.

    Five prefill tokens in two sequences; decode runs once for two sequences with a short
    block table (one program per KV head) and once for one sequence with a long one (split
    across programs, then merged); both attention ops again with a sliding window (Mistral's
    4096 keys, gpt-oss's 128 for the split); a mixture-of-experts layer's experts; the
    sampler's kernel with and without logit_bias.
    """
    heads, kv_heads, head_dim = shape.num_heads, shape.num_kv_heads, shape.head_dim
    hidden, intermediate = shape.hidden_size, shape.intermediate_size
    tokens, batch = 5, 2
    cache = torch.zeros(8, CACHE_BLOCK_SIZE, kv_heads, head_dim, dtype=dtype)
    lens = torch.tensor([5, 9], dtype=torch.int32)

    def zeros(*size: int, of: torch.dtype = dtype) -> torch.Tensor:
        return torch.zeros(size, dtype=of)

    def decode(sequences: int, table_width: int) -> tuple:
        tables = zeros(sequences, table_width, of=torch.int32)
        return (zeros(sequences, heads, head_dim), cache, cache, tables, lens[:sequences],
                head_dim**-0.5)

    def prefill() -> tuple:
        return (zeros(tokens, heads, head_dim), cache, cache, zeros(batch, 4, of=torch.int32),
                torch.tensor([0, 2, tokens], dtype=torch.int32), lens, head_dim**-0.5)

    def sampler(bias: bool) -> tuple:
        vocab, fp32 = shape.vocab_size, torch.float32
        return (zeros(batch, vocab, of=fp32), zeros(batch, vocab, of=torch.int32),
                zeros(batch, vocab, of=torch.bool), zeros(batch, of=fp32), zeros(batch, of=fp32),
                torch.ones(batch), zeros(batch, vocab, of=fp32) if bias else None,
                torch.full((batch,), -1))

    return {
        "rms_norm": ("rms_norm", (zeros(tokens, hidden), zeros(hidden), 1e-5)),
        # The decoder carries its residual stream in fp32 (workers/model/llama.py).
        "rms_norm (fp32 residual)": (
            "rms_norm",
            (zeros(tokens, hidden), zeros(hidden), 1e-5, zeros(tokens, hidden, of=torch.float32)),
        ),
        "rotary_embedding": (
            "rotary_embedding",
            (zeros(tokens, heads, head_dim), zeros(tokens, kv_heads, head_dim),
             zeros(tokens, of=torch.int64), zeros(64, head_dim)),
        ),
        "silu_and_mul": ("silu_and_mul", (zeros(tokens, 2 * intermediate),)),
        # A mixture-of-experts layer's experts (Qwen3-MoE's shape: experts narrower than a
        # dense MLP, here a quarter of the hidden size), two of four per token.
        "moe_experts": (
            "moe_experts",
            (zeros(tokens, hidden), zeros(4, hidden // 2, hidden), zeros(4, hidden, hidden // 4),
             torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]][:tokens]),
             zeros(tokens, 2, of=torch.float32)),
        ),
        "store_kv_cache": (
            "store_kv_cache",
            (zeros(tokens, kv_heads, head_dim), zeros(tokens, kv_heads, head_dim), cache,
             cache.clone(), zeros(tokens, of=torch.int64)),
        ),
        "paged_decode_attention": ("paged_decode_attention", decode(batch, 1)),
        # One long sequence: the most splits, so the merge's widest tile.
        "paged_decode_attention (split)": ("paged_decode_attention", decode(1, 256)),
        "paged_decode_attention (sliding window)": (
            "paged_decode_attention", (*decode(batch, 1), 4096)
        ),
        "paged_decode_attention (split, sliding window)": (
            "paged_decode_attention", (*decode(1, 256), 128)
        ),
        "prefill_attention": ("prefill_attention", prefill()),
        "prefill_attention (sliding window)": ("prefill_attention", (*prefill(), 4096)),
        "apply_logits_processors": ("apply_logits_processors", sampler(bias=False)),
        "apply_logits_processors (logit_bias)": ("apply_logits_processors", sampler(bias=True)),
    }


class _Recorder:
    """Stands in for a kernel: `kernel[grid](*args, **kwargs)` records the call."""

    def __init__(self, name: str, kernel: Any, calls: list[tuple[str, Any, tuple, dict]]):
        self.name, self.kernel, self.calls = name, kernel, calls

    def __getitem__(self, grid: object) -> Any:
        return lambda *args, **kwargs: self.calls.append((self.name, self.kernel, args, kwargs))


def triton_kernels() -> dict[str, tuple[Any, str]]:
    """Every `*_kernel` JITFunction in kernels/: name -> (kernel, module name)."""
    from triton.runtime.jit import JITFunction

    import kernels

    found = {}
    for module_info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{module_info.name}")
        for name, value in vars(module).items():
            if name.endswith("_kernel") and isinstance(value, JITFunction):
                found[name] = (value, module.__name__)
    return found


def record_launches(
    shape: ModelShape, dtype: torch.dtype, multiprocessors: int
) -> list[RecordedLaunch]:
    """Run every example through its launcher as on a GPU with this many SMs (the decode
    launcher sizes its context splits by them), recording the kernels' launches."""
    import kernels.context_splits

    found = triton_kernels()
    calls: list[tuple[str, Any, tuple, dict]] = []
    modules = {importlib.import_module(module_name) for _, module_name in found.values()}
    modules.add(kernels.context_splits)
    originals = {module: dict(vars(module)) for module in modules}
    try:
        for name, (kernel, module_name) in found.items():
            setattr(importlib.import_module(module_name), name, _Recorder(name, kernel, calls))
        for module in modules:
            # CPU tensors are fine: nothing is launched, only the arguments are recorded.
            module.check_launchable = lambda **_: None  # type: ignore[attr-defined]
        kernels.context_splits._busy_program_target = lambda device: 2 * multiprocessors
        launches = []
        for label, (op, args) in launch_examples(shape, dtype).items():
            calls.clear()
            getattr(importlib.import_module(f"kernels.{op}"), op)(*args)
            launches += [RecordedLaunch(label, *call) for call in calls]
        return launches
    finally:
        for module, original in originals.items():
            module.__dict__.update(original)
