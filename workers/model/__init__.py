"""The model layer: checkpoint loading and the paged-attention forward pass."""

from workers.model.attention import (
    AttentionMetadata,
    KVCache,
    allocate_kv_cache,
    kv_cache_bytes_per_block,
)
from workers.model.config import ModelConfig
from workers.model.llama import CausalLM
from workers.model.loader import (
    DEFAULT_MODEL,
    SERVED_MODELS,
    LoadedModel,
    load_model,
    serving_dtype,
)

__all__ = [
    "DEFAULT_MODEL",
    "SERVED_MODELS",
    "AttentionMetadata",
    "CausalLM",
    "KVCache",
    "LoadedModel",
    "ModelConfig",
    "allocate_kv_cache",
    "kv_cache_bytes_per_block",
    "load_model",
    "serving_dtype",
]
