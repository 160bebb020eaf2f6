"""Per-request sampling settings as the engine's hot path reads them: how each next token
is chosen and when generation stops.

The settings are defined, bounded and normalized once, by the request event
(events/sampling_settings.py); `sampling_params_of` takes them from there as they are.
The checks below only guard direct engine users (tests, benchmarks) against values the
event would have refused, with the event's own limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events import RequestAccepted
from events.request_settings import (
    LOGIT_BIAS_LIMIT,
    MAX_TOP_LOGPROBS,
    PENALTY_LIMIT,
)

if TYPE_CHECKING:
    from xgrammar import CompiledGrammar

# Below this temperature, sampling is indistinguishable from argmax and dividing by it
# would overflow, so the request is treated as greedy.
GREEDY_TEMPERATURE = 1e-5


@dataclass(slots=True)
class SamplingParams:
    # One field per SamplingSettings field, same name and meaning (tests hold them in step).
    temperature: float = 1.0
    top_p: float = 1.0
    # 0 turns top-k off.
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[int, float] = field(default_factory=dict)
    # None generates until a stop condition or the context length.
    max_output_tokens: int | None = None
    # Number of top alternatives to report per token; None reports no logprobs at all.
    top_logprobs: int | None = None
    # The request's other settings the engine acts on. Tokens a think block may hold before its end marker is forced; None is unlimited,
    # 0 closes the block at once.
    thinking_token_budget: int | None = None
    # Lower runs first; ties go to the earlier request.
    priority: int = 0
    # The prefix-cache scope (prefix_cache_scope: the owner, then the client's
    # cache_salt): requests with different scopes never share cached KV blocks.
    cache_salt: str | None = None
    # Whose request it is (a digest of its API key, or "shared" without keys; None in
    # events written before owners were): the scheduler shares its batch between owners.
    owner: str | None = None
    # An xgrammar CompiledGrammar the answer (never the reasoning) must match; None: free.
    grammar: CompiledGrammar | None = None

    def __post_init__(self) -> None:
        # Above the request limit is still well defined (a flatter distribution).
        _require(self.temperature >= 0.0, "temperature", self.temperature)
        _require(0.0 < self.top_p <= 1.0, "top_p", self.top_p)
        _require(self.top_k >= 0, "top_k", self.top_k)
        _require(0.0 <= self.min_p <= 1.0, "min_p", self.min_p)
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _require(-PENALTY_LIMIT <= value <= PENALTY_LIMIT, name, value)
        _require(self.repetition_penalty > 0.0, "repetition_penalty", self.repetition_penalty)
        _require(all(text for text in self.stop), "stop", self.stop)
        _require(
            all(abs(bias) <= LOGIT_BIAS_LIMIT for bias in self.logit_bias.values()),
            "logit_bias", self.logit_bias,
        )
        _require(self.max_output_tokens is None or self.max_output_tokens >= 1,
                 "max_output_tokens", self.max_output_tokens)
        _require(self.top_logprobs is None or 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS,
                 "top_logprobs", self.top_logprobs)
        _require(self.thinking_token_budget is None or self.thinking_token_budget >= 0,
                 "thinking_token_budget", self.thinking_token_budget)

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


def _require(holds: bool, name: str, value: object) -> None:
    if not holds:
        raise ValueError(f"{name} may not be {value!r}: a request could not set it")


def sampling_params_of(
    request: RequestAccepted, grammar: CompiledGrammar | None = None
) -> SamplingParams:
    """The engine's parameters for an accepted request: its sampling settings field for
    field, already validated and normalized by the event model, plus the request's
    thinking budget, priority, prefix-cache scope and owner."""
    return SamplingParams(
        **dict(request.sampling),
        thinking_token_budget=request.thinking_token_budget,
        priority=request.priority,
        cache_salt=prefix_cache_scope(request.owner, request.cache_salt),
        owner=request.owner,
        grammar=grammar,
    )



def prefix_cache_scope(owner: str | None, cache_salt: str | None) -> str | None:
    """What a request's cached KV blocks are keyed under: its owner (one tenant never
    reuses, and so can never probe, another's prompts), and within the owner the
    client's `cache_salt`. Length-prefixed, so no owner and salt pair can spell another."""
    if owner is None and cache_salt is None:
        return None
    owner_part = owner or ""
    return f"{len(owner_part)}:{owner_part}:{cache_salt or ''}"
