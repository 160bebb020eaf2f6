"""Settings of the continuous-batching engine: KV cache size, batch limits and kernel backend."""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.engine.speculation import SpeculationConfig

KERNEL_BACKENDS = ("auto", "triton", "cpu", "torch")
KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(slots=True)
class EngineConfig:
    # Tokens per KV-cache block; also the granularity of prefix reuse.
    block_size: int = 16
    # Fixed number of KV blocks; None sizes the cache from kv_cache_memory_fraction.
    num_kv_blocks: int | None = None
    # Share of the device's memory given to the KV cache: of the GPU's free memory after
    # loading on CUDA, of the host's available memory on CPU.
    kv_cache_memory_fraction: float = 0.1
    max_num_seqs: int = 64
    # Tokens one prefill step may compute. Prompts are not split across steps, so this is
    # also the longest prompt (plus resumed output) the engine accepts.
    max_num_batched_tokens: int = 8192
    # Longest sequence (prompt plus output); None takes the model's context length.
    max_model_len: int | None = None
    kernels: str = "auto"
    # KV-cache dtype; "auto" follows the model's weights.
    dtype: str = "auto"
    # CPU threads for decode steps; None uses every core this process may run on. Prefill
    # steps always use every core: few, large matmuls, where more threads pay even on a
    # machine shared with other busy processes, unlike decode's hundreds of small ops.
    num_threads: int | None = None
    # A decode step of at least this many sequences uses every core too, where the model
    # gives a row the same bits at any thread count (the fused CPU ops with quantized
    # linears on them): a few sequences' steps are too short to keep a second thread
    # busy beside the API on a small machine, a wide step's matmuls are not (served on 2
    # cores, every core at every width gave 0.75x at 1 stream, 1.13x at 8 and 1.32x at
    # 32; 4 lies between, unmeasured). A prefill counts the tokens it computes: fewer
    # than this past a cached prefix keep the decode threads (a one-token prefill served on
    # 2 cores took 22-28 ms on both, about 16 on one). None: never.
    wide_decode_rows: int | None = 4
    # Prompt-lookup speculative decoding (workers/engine/speculation.py): on, adaptive.
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be positive, got {self.num_kv_blocks}")
        if not 0.0 < self.kv_cache_memory_fraction <= 1.0:
            raise ValueError(
                f"kv_cache_memory_fraction must lie in (0, 1], got {self.kv_cache_memory_fraction}"
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be positive, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be positive, got {self.max_num_batched_tokens}"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be at least 2, got {self.max_model_len}")
        if self.kernels not in KERNEL_BACKENDS:
            raise ValueError(f"kernels must be one of {KERNEL_BACKENDS}, got {self.kernels!r}")
        if self.dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"dtype must be one of {KV_CACHE_DTYPES}, got {self.dtype!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be positive, got {self.num_threads}")
        if self.wide_decode_rows is not None and self.wide_decode_rows < 1:
            raise ValueError(f"wide_decode_rows must be positive, got {self.wide_decode_rows}")
