"""Think blocks: finds the model's reasoning markers in generated tokens, counts the tokens
inside each block and forces the end marker once a block has used its budget.

Markers are matched as token-id sequences (the tokenization of the profile's marker
strings), as vLLM's thinking-budget processor does, so a forced marker and a counted one
are the same tokens. Reasoning tokens are the tokens strictly between a start marker (or
the prompt opening a block) and the end marker: neither marker's tokens count. So with
budget N and a model that would think longer, exactly N tokens lie between the markers
and the request reports N reasoning tokens.

A request with a budget asked for reasoning *then an answer*, so its response may not end
before the answer has begun (`holds_answer_open`): not inside a think block, which the
model's end marker or the budget's closes within the budget, nor after the block while the
answer holds only whitespace. Without this, a model that knows no think blocks (the
default SmolLM2-135M, whose thinking is a template variant) mostly answered inside the
block and sampled EOS there, or sampled EOS right after the forced end marker: reasoning
and no answer. It is vLLM's `min_tokens` (stop tokens masked) applied to the two places an
answer can be lost, bounded by the budget plus the answer's leading whitespace. Without a
budget nothing is masked: a block could then run to the end of the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from workers.engine.sequence import Sequence
from workers.model.harmony import answer_opening


class ThinkEvent(Enum):
    OPENED = "opened"
    CLOSED_BY_MODEL = "model"
    CLOSED_BY_BUDGET = "budget"


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    # Empty when the profile has no start marker: then only the prompt can open a block.
    start_token_ids: tuple[int, ...]
    end_token_ids: tuple[int, ...]
    # What the budget forces: the end marker, then what opens the answer where the format
    # needs more than the marker (harmony's `<|start|>assistant<|channel|>final<|message|>`).
    forced_end_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.forced_end_token_ids[:len(self.end_token_ids)] != self.end_token_ids:
            object.__setattr__(self, "forced_end_token_ids", self.end_token_ids)

    @classmethod
    def from_strings(
        cls, start: str | None, end: str | None, encode: Callable[[str], list[int]]
    ) -> ReasoningMarkers | None:
        """None for a model without an end marker: it has no think blocks to close."""
        if not end:
            return None
        end_token_ids = tuple(encode(end))
        if not end_token_ids:
            raise ValueError(f"reasoning end marker {end!r} encodes to no tokens")
        opening = answer_opening(start, end)
        return cls(tuple(encode(start)) if start else (), end_token_ids,
                   end_token_ids + tuple(encode(opening)) if opening else end_token_ids)


class ThinkingBudget:
    """Works on a Sequence's ThinkState. Every generated token goes through
    `forced_token` (before the step) and `observe` (after it), live and when a resumed
    request replays its earlier output, so both reach the same state."""

    def __init__(
        self, markers: ReasoningMarkers, blank_token_ids: frozenset[int] = frozenset()
    ) -> None:
        self.markers = markers
        # Tokens whose text is whitespace or nothing: they do not begin an answer.
        self.blank_token_ids = blank_token_ids

    def begin(self, seq: Sequence, prompt_opens_reasoning: bool) -> None:
        seq.think.in_block = prompt_opens_reasoning
        seq.think.tokens_in_block = 0
        seq.think.forced_token_ids.clear()
        seq.think.num_reasoning_tokens = 0
        seq.think.awaiting_answer = False

    def forced_token(self, seq: Sequence) -> int | None:
        """The token the next step must produce, or None to sample freely."""
        budget = seq.params.thinking_token_budget
        if (
            seq.think.in_block
            and budget is not None
            and not seq.think.forced_token_ids
            and seq.think.tokens_in_block >= budget
        ):
            # A grammar-held answer opens as its grammar says (a harmony call, not final).
            forced = (self.markers.forced_end_token_ids if seq.grammar is None
                      else self.markers.end_token_ids)
            seq.think.forced_token_ids.extend(forced)
        return seq.think.forced_token_ids[0] if seq.think.forced_token_ids else None

    def observe(self, seq: Sequence, token_id: int) -> ThinkEvent | None:
        """Updates the think state with a token just appended to the sequence."""
        was_forced = bool(seq.think.forced_token_ids) and seq.think.forced_token_ids[0] == token_id
        if was_forced:
            seq.think.forced_token_ids.pop(0)
        else:
            # Only a replayed history that diverged from what was forced gets here.
            seq.think.forced_token_ids.clear()
        awaiting_answer, seq.think.awaiting_answer = seq.think.awaiting_answer, False
        if seq.think.in_block:
            seq.think.tokens_in_block += 1
            end = self.markers.end_token_ids
            if seq.think.tokens_in_block >= len(end) and _ends_with(seq.token_ids, end):
                seq.think.num_reasoning_tokens += seq.think.tokens_in_block - len(end)
                seq.think.in_block = False
                seq.think.tokens_in_block = 0
                if not was_forced:
                    seq.think.forced_token_ids.clear()
                seq.think.awaiting_answer = True
                return ThinkEvent.CLOSED_BY_BUDGET if was_forced else ThinkEvent.CLOSED_BY_MODEL
            return None
        if was_forced:
            # The rest of the forced sequence opens the answer: it has not begun yet.
            seq.think.awaiting_answer = True
            return None
        if awaiting_answer and token_id in self.blank_token_ids:
            seq.think.awaiting_answer = True  # whitespace alone has not begun the answer
        start = self.markers.start_token_ids
        if start and seq.num_output_tokens >= len(start) and _ends_with(seq.token_ids, start):
            # A later block gets a fresh budget.
            seq.think.in_block = True
            seq.think.tokens_in_block = 0
            return ThinkEvent.OPENED
        return None

    def reasoning_tokens(self, seq: Sequence) -> int:
        """Reasoning tokens so far, the open block's included, forced marker tokens not."""
        if not seq.think.in_block:
            return seq.think.num_reasoning_tokens
        # Inside the block only the end marker is forced: whatever follows it comes after.
        forced_so_far = (
            len(self.markers.end_token_ids)
            - max(len(seq.think.forced_token_ids) - self._opening_length(seq), 0)
            if seq.think.forced_token_ids
            else 0
        )
        return seq.think.num_reasoning_tokens + seq.think.tokens_in_block - forced_so_far

    def _opening_length(self, seq: Sequence) -> int:
        """How many tokens after the end marker the budget forces for this sequence."""
        if seq.grammar is not None:
            return 0
        return len(self.markers.forced_end_token_ids) - len(self.markers.end_token_ids)

    def partial_marker_length(self, seq: Sequence) -> int:
        """How many trailing tokens could be the opening of the marker awaited next (the end
        marker inside a block, the start marker outside): text that must wait to learn
        whether it is a marker, which belongs to no channel."""
        if seq.think.in_block:
            marker, available = self.markers.end_token_ids, seq.think.tokens_in_block
        else:
            marker, available = self.markers.start_token_ids, seq.num_output_tokens
        tail = seq.token_ids
        for length in range(min(len(marker) - 1, available), 0, -1):
            if tail[-length:] == list(marker[:length]):
                return length
        return 0


def holds_answer_open(seq: Sequence, forced_token_id: int | None) -> bool:
    """Whether a budgeted request's next token may not end the sequence: it is thinking, or
    its think block has just closed. (A forced token takes precedence; after the block, a
    grammar answer is left to its grammar, which may allow only the end.)"""
    if forced_token_id is not None or seq.params.thinking_token_budget is None:
        return False
    return seq.think.in_block or (seq.think.awaiting_answer and seq.grammar is None)


def _ends_with(token_ids: list[int], suffix: tuple[int, ...]) -> bool:
    return len(token_ids) >= len(suffix) and tuple(token_ids[-len(suffix) :]) == suffix
