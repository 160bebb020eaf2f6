"""What output processing hands out each step (`Delta`, with each token's `TokenLogprob`
as the sampler drew it) and keeps for one sequence (`OutputState`): kept below the
`Sequence` that holds the state, so the sequence never imports the processor or the
sampler that fill it (workers/engine/output_processor.py, workers/engine/sampler.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.model.detokenizer import IncrementalDetokenizer


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    # The most likely tokens at this step, best first: (token id, logprob).
    top_logprobs: list[tuple[int, float]]


@dataclass(slots=True)
class Delta:
    channel: str
    text: str
    token_ids: list[int]
    # One entry per token when logprobs were asked for; a token replayed from an earlier
    # worker has None (its logprob was streamed back then).
    logprobs: list[TokenLogprob | None] | None = None


@dataclass(slots=True)
class OutputState:
    channel: str
    detokenizer: IncrementalDetokenizer
    # Tokens not yet given to a channel: they may open a think marker.
    pending_token_ids: list[int] = field(default_factory=list)
    pending_logprobs: list[TokenLogprob | None] = field(default_factory=list)
    # Text of the text channel not yet emitted: it may open a stop string.
    held_text: str = ""
    # Deltas of the step in progress, handed out by `take_deltas`.
    deltas: list[Delta] = field(default_factory=list)
