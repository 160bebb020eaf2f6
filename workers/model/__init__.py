"""The model layer: loading a checkpoint, its tokenizer and chat template, its profile, the
host it runs on, and the paged-attention forward pass. Names are imported lazily, so the
torch-free parts (tokenizer, chat template, profile, host) load without torch: `spate
serve` sizes its worker and the worker renders prompts without importing it."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "AttentionMetadata": "workers.model.attention",
    "KVCache": "workers.model.attention",
    "allocate_kv_cache": "workers.model.attention",
    "kv_cache_bytes_per_block": "workers.model.attention",
    "ModelConfig": "workers.model.config",
    "CausalLM": "workers.model.llama",
    "DEFAULT_MODEL": "workers.model.loader",
    "SERVED_MODELS": "workers.model.loader",
    "LoadedModel": "workers.model.loader",
    "load_model": "workers.model.loader",
    "serving_dtype": "workers.model.loader",
    "serving_matmul_dtype": "workers.model.loader",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workers.model' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = sorted(_EXPORTS)
