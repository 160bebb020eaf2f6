"""What the worker process needs of a model: its engine, its card, and how to turn a
RequestAccepted into prompt token ids and sampling parameters."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from events import ModelCard, RequestAccepted

log = logging.getLogger("spate.worker.model")


class PromptTooLong(ValueError):
    pass


@dataclass(slots=True)
class Prompt:
    token_ids: list[int]
    opens_reasoning: bool


class ServedModel(Protocol):
    """The worker drives any engine with this shape (the real one, or a benchmark's)."""

    card: ModelCard
    engine: Any

    def build_prompt(self, request: RequestAccepted) -> Prompt: ...

    def sampling_params(self, request: RequestAccepted) -> Any: ...


class EngineModel:
    """A real model behind the continuous-batching engine."""

    def __init__(self, loaded: Any, engine: Any, served_name: str, worker_id: str) -> None:
        self.loaded = loaded
        self.engine = engine
        profile = loaded.profile
        self.context_length = engine.max_model_len
        self.card = ModelCard(
            name=served_name,
            context_length=self.context_length,
            reasoning_start=profile.reasoning_start,
            reasoning_end=profile.reasoning_end,
            tool_call_format=profile.tool_call_format,
            worker_id=worker_id,
            created_at=time.time(),
        )

    def build_prompt(self, request: RequestAccepted) -> Prompt:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        text = self.loaded.chat_template.render(
            messages,
            enable_thinking=request.enable_thinking,
            reasoning_effort=request.reasoning_effort,
            chat_template_kwargs=request.chat_template_kwargs,
        )
        token_ids = self.loaded.tokenizer.encode(text)
        if len(token_ids) >= self.context_length:
            raise PromptTooLong(
                f"The input is {len(token_ids)} tokens; this model's context holds "
                f"{self.context_length} tokens including the output."
            )
        return Prompt(token_ids, self.loaded.profile.prompt_opens_reasoning(text))

    def sampling_params(self, request: RequestAccepted) -> Any:
        from workers.engine.sampling_params import SamplingParams

        sampling = request.sampling
        return SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            seed=sampling.seed,
            stop=list(sampling.stop),
            max_tokens=sampling.max_output_tokens,
            thinking_token_budget=request.thinking_token_budget,
        )


def load_engine_model(settings: Any) -> EngineModel:
    """Load the configured model and build its engine (seconds; run off the event loop)."""
    import torch

    from workers.engine import EngineConfig, LLMEngine
    from workers.model import load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    started = time.perf_counter()
    loaded = load_model(settings.model, device=device, dtype=dtype)
    config = EngineConfig(
        kernels=settings.kernels,
        max_num_seqs=settings.max_num_seqs,
        num_kv_blocks=settings.num_kv_blocks,
    )
    engine = LLMEngine(loaded, config)
    log.info("loaded %s on %s in %.1fs", loaded.name, device, time.perf_counter() - started)
    return EngineModel(loaded, engine, settings.served_model_name or loaded.name, settings.worker_id)
