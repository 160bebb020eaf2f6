"""The continuous-batching engine: scheduler, paged KV blocks, sampler and think-budget logic
around a loaded model. Names are imported lazily so the torch-free parts load without torch."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "EngineConfig": "workers.engine.config",
    "SamplingParams": "workers.engine.sampling_params",
    "LLMEngine": "workers.engine.llm_engine",
    "RequestOutput": "workers.engine.llm_engine",
    "Delta": "workers.engine.output_state",
    "TokenLogprob": "workers.engine.output_state",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workers.engine' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = sorted(_EXPORTS)
