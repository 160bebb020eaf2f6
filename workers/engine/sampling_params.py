"""Per-request sampling settings: how each next token is chosen and when generation stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# OpenAI's logit_bias range; larger magnitudes would only mean "always" or "never".
LOGIT_BIAS_LIMIT = 100.0
MAX_TOP_LOGPROBS = 20
# Below this temperature, sampling is indistinguishable from argmax and dividing by it
# would overflow, so the request is treated as greedy.
GREEDY_TEMPERATURE = 1e-5


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    # 0 or -1 turns top-k off.
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # None generates until a stop condition or the context length.
    max_tokens: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    # Number of top alternatives to report per token; None reports no logprobs at all.
    logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    # Tokens a think block may hold before its end marker is forced; None (or -1) is
    # unlimited, 0 closes the block at once.
    thinking_token_budget: int | None = None
    # Lower runs first; ties go to the earlier request.
    priority: int = 0
    # Requests with different salts never share cached KV blocks.
    cache_salt: str | None = None
    # An xgrammar CompiledGrammar the answer (never the reasoning) must match; None: free.
    grammar: Any = None

    def __post_init__(self) -> None:
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k == -1:
            self.top_k = 0
        if self.top_k < 0:
            raise ValueError(f"top_k must be -1, 0 or positive, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must lie in [0, 1], got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{name} must lie in [-2, 2], got {value}")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must lie in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs}")
        if self.thinking_token_budget == -1:
            self.thinking_token_budget = None
        if self.thinking_token_budget is not None and (
            isinstance(self.thinking_token_budget, bool)
            or not isinstance(self.thinking_token_budget, int)
            or self.thinking_token_budget < 0
        ):
            raise ValueError(
                "thinking_token_budget must be -1, None or a non-negative integer, "
                f"got {self.thinking_token_budget!r}"
            )
        if any(not isinstance(text, str) or not text for text in self.stop):
            raise ValueError("stop strings must be non-empty strings")
        self.stop = list(self.stop)
        self.stop_token_ids = [int(token_id) for token_id in self.stop_token_ids]
        self.logit_bias = {
            int(token_id): min(max(float(bias), -LOGIT_BIAS_LIMIT), LOGIT_BIAS_LIMIT)
            for token_id, bias in self.logit_bias.items()
        }

    def ends_sequence(self, token_id: int, eos_token_ids: frozenset[int]) -> bool:
        """Whether generating `token_id` ends the sequence: a stop token, or EOS unless
        ignore_eos keeps it going."""
        return token_id in self.stop_token_ids or (
            token_id in eos_token_ids and not self.ignore_eos
        )

    def ending_token_ids(self, eos_token_ids: frozenset[int]) -> list[int]:
        """Every token id for which `ends_sequence` holds."""
        ending = [] if self.ignore_eos else list(eos_token_ids)
        return ending + [token_id for token_id in self.stop_token_ids if token_id not in ending]

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )
