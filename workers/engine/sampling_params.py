"""Per-request sampling settings as the engine's hot path reads them: how each next token
is chosen and when generation stops.

The settings themselves are the request event's `SamplingSettings`
(events/sampling_settings.py), defined, bounded and normalized there and carried here as
they are. `SamplingParams` adds only what the engine needs beside them: the thinking
budget, the scheduling priority and owner, the prefix-cache scope and the compiled grammar.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from events import RequestAccepted, SamplingSettings

if TYPE_CHECKING:
    from xgrammar import CompiledGrammar

# Below this temperature, sampling is indistinguishable from argmax and dividing by it
# would overflow, so the request is treated as greedy.
GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True, slots=True)
class SamplingParams:
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    # Tokens a think block may hold before its end marker is forced; None is unlimited,
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
        # The event normalizes the budget; this guards direct engine users, who pass a
        # number of tokens (no -1 sentinel) and nothing else here checks it.
        if self.thinking_token_budget is not None and self.thinking_token_budget < 0:
            raise ValueError(
                f"thinking_token_budget may not be {self.thinking_token_budget!r}: "
                "a request could not set it"
            )

    @classmethod
    def of(
        cls,
        *,
        thinking_token_budget: int | None = None,
        priority: int = 0,
        cache_salt: str | None = None,
        owner: str | None = None,
        grammar: CompiledGrammar | None = None,
        **settings: Any,
    ) -> SamplingParams:
        """For direct engine users (tests, benchmarks): the settings by name, validated by
        `SamplingSettings` (its ValidationError is a ValueError). A name it does not have
        is a TypeError here, since the model itself would ignore it silently."""
        unknown = sorted(settings.keys() - SamplingSettings.model_fields.keys())
        if unknown:
            raise TypeError(f"SamplingSettings has no field {', '.join(map(repr, unknown))}")
        return cls(
            SamplingSettings(**settings),
            thinking_token_budget=thinking_token_budget,
            priority=priority,
            cache_salt=cache_salt,
            owner=owner,
            grammar=grammar,
        )

    def ends_sequence(self, token_id: int, eos_token_ids: frozenset[int]) -> bool:
        """Whether generating `token_id` ends the sequence: a stop token, or EOS unless
        ignore_eos keeps it going."""
        return token_id in self.sampling.stop_token_ids or (
            token_id in eos_token_ids and not self.sampling.ignore_eos
        )

    def ending_token_ids(self, eos_token_ids: frozenset[int]) -> list[int]:
        """Every token id for which `ends_sequence` holds."""
        ending = [] if self.sampling.ignore_eos else list(eos_token_ids)
        return ending + [
            token_id for token_id in self.sampling.stop_token_ids if token_id not in ending
        ]

    @property
    def greedy(self) -> bool:
        return self.sampling.temperature < GREEDY_TEMPERATURE

    @property
    def has_penalties(self) -> bool:
        sampling = self.sampling
        return (
            sampling.presence_penalty != 0.0
            or sampling.frequency_penalty != 0.0
            or sampling.repetition_penalty != 1.0
        )


def sampling_params_of(
    request: RequestAccepted, grammar: CompiledGrammar | None = None
) -> SamplingParams:
    """The engine's parameters for an accepted request: its sampling settings as the event
    holds them, plus the request's thinking budget, priority, prefix-cache scope and owner."""
    return SamplingParams(
        request.sampling,
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
