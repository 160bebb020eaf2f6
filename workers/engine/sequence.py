"""One request inside the engine: its tokens and KV blocks, and its think, random,
grammar and output state, each grouped in an object of its own."""

from __future__ import annotations

from collections.abc import Sequence as TokenIds
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING

from workers.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from workers.engine.answer_grammar import AnswerGrammar
    from workers.engine.draft_state import DraftState
    from workers.engine.output_state import OutputState


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(slots=True)
class ThinkState:
    """Where a sequence stands in its think blocks; owned by ThinkingBudget."""

    in_block: bool = False
    tokens_in_block: int = 0
    # The end marker's tokens still to force, once a block used its budget.
    forced_token_ids: list[int] = field(default_factory=list)
    num_reasoning_tokens: int = 0
    # A block just closed and no answer token has followed yet.
    awaiting_answer: bool = False


@dataclass(slots=True)
class SeededDraws:
    """A seeded request's random state; owned by the sampler."""

    # Created by the sampler on first use, so that this module and the scheduler stay
    # free of torch.
    generator: torch.Generator | None = None
    # Random draws a resumed request makes before its first new token, so its generator
    # stands where the uninterrupted run's stood.
    num_to_replay: int = 0


class Sequence:
    """Token ids are prompt then output, in one list, because prefill, the KV slot of
    each token and prefix hashing all index them the same way."""

    __slots__ = (
        "request_id",
        "arrival_order",
        "params",
        "status",
        "token_ids",
        "num_prompt_tokens",
        "max_num_tokens",
        "block_table",
        "num_cached_tokens",
        "kv_copy",
        "num_prompt_cached_tokens",
        "think",
        "draws",
        "output_state",
        "finish_reason",
        "grammar",
        "draft_state",
    )

    def __init__(
        self,
        request_id: str,
        arrival_order: int,
        prompt_token_ids: TokenIds[int],
        params: SamplingParams,
        max_num_tokens: int,
        output_token_ids: TokenIds[int] = (),
    ) -> None:
        self.request_id = request_id
        self.arrival_order = arrival_order
        self.params = params
        self.status = SequenceStatus.WAITING
        self.token_ids: list[int] = [*prompt_token_ids, *output_token_ids]
        self.num_prompt_tokens = len(prompt_token_ids)
        # Prompt plus output may not grow past this (the context length, or max_output_tokens).
        self.max_num_tokens = max_num_tokens
        self.block_table: list[int] = []
        # Leading tokens whose KV came from the prefix cache at the latest allocation.
        self.num_cached_tokens = 0
        # (source, destination) block ids: a cached block that opens like this sequence's
        # first block past its full-block hits, whose keys and values are copied into the
        # sequence's own block before its prefill (set by BlockManager.allocate).
        self.kv_copy: tuple[int, int] | None = None
        # What usage reports: prompt tokens served from the cache when first scheduled.
        self.num_prompt_cached_tokens: int | None = None
        self.think = ThinkState()
        self.draws = SeededDraws()
        self.output_state: OutputState | None = None
        self.finish_reason: str | None = None
        # The grammar the answer must match (structured output, tool calls); None: free text.
        self.grammar: AnswerGrammar | None = None
        # Prompt-lookup drafting's index and record, made at the first decode step that
        # may draft (workers/engine/speculation.py).
        self.draft_state: DraftState | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def schedule_key(self) -> tuple[int, int]:
        """Lower keys run first and are preempted last."""
        return (self.params.priority, self.arrival_order)

    def num_blocks(self, block_size: int) -> int:
        return (len(self.token_ids) + block_size - 1) // block_size

    def block_token_ids(self, block_index: int, block_size: int) -> list[int]:
        start = block_index * block_size
        return self.token_ids[start : start + block_size]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
