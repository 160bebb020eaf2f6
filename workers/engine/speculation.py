"""Speculative decoding without a draft model: which sequences of a decode step guess their
next tokens by prompt lookup (workers/engine/ngram_proposer.py), how many, and what each
sequence has learned about its guesses (workers/engine/draft_state.py).

The engine verifies a sequence's draft in the step's one forward pass (its last token and
the draft, as a short prefill on the paged cache) and keeps the longest prefix the sampler
itself would have chosen, token by token, plus the sampler's own next token. A row's
logits have the same bits in a prefill as in a decode step (the exact-resume work), and
each token is sampled with the sequence's state of that moment, so the output is exactly
what decoding without speculation gives: tokens, logprobs and seeded draws.

A draft token costs a row of compute whether or not it is kept, so drafting is chosen per
step by its expected worth: each sequence keeps an estimate of how often its guesses are
kept, and a draft token is verified only where its expected tokens per unit of compute
beat those of the step without it (a decode step of B rows costs 1 + row_cost * (B - 1)
one-row steps). Guesses that keep failing stop being made, and a batch past
`max_batch_seqs` drafts nothing: there the CPU path's rows are no longer cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.engine.block_manager import BlockManager
from workers.engine.draft_state import DraftState
from workers.engine.sequence import Sequence


@dataclass(slots=True)
class SpeculationConfig:
    # Whether decode steps may verify prompt-lookup drafts. Taken only where a prefilled
    # row gets a decode step's bits (ModelRunner.prefill_rows_exact), so the output never
    # changes.
    enabled: bool = True
    # The most draft tokens one sequence verifies in a step.
    max_draft_tokens: int = 8
    # Decode steps of more sequences than this draft nothing: measured on the CPU path,
    # a batch of 8 whose drafts were 81% kept ran at 0.77x (docs/performance.md).
    max_batch_seqs: int = 2
    # The longest and shortest suffix looked up in the sequence's own tokens.
    max_ngram: int = 4
    min_ngram: int = 2
    # What one more row costs a decode step, as a share of a one-row step: about 0.3 on
    # the CPU path (docs/performance.md); a GPU's small steps are nearer 0.
    row_cost: float = 0.3

    def __post_init__(self) -> None:
        if self.max_batch_seqs < 1:
            raise ValueError(f"max_batch_seqs must be positive, got {self.max_batch_seqs}")
        if self.max_draft_tokens < 1:
            raise ValueError(f"max_draft_tokens must be positive, got {self.max_draft_tokens}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}"
            )
        if not 0.0 < self.row_cost <= 1.0:
            raise ValueError(f"row_cost must lie in (0, 1], got {self.row_cost}")


@dataclass(slots=True)
class SpeculationStats:
    """Totals since the engine started, for benchmarks and metrics."""

    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


class Speculator:
    def __init__(self, config: SpeculationConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.stats = SpeculationStats()

    def drafts(self, seqs: list[Sequence]) -> list[list[int]] | None:
        """Each scheduled sequence's draft for the coming decode step (empty where it
        guesses nothing), with KV slots held for it; None when no sequence drafts."""
        config = self.config
        batch = len(seqs)
        if batch > config.max_batch_seqs:
            return None
        guesses: list[list[int]] = []
        candidates: list[tuple[float, int, int]] = []
        for row, seq in enumerate(seqs):
            room = min(config.max_draft_tokens, seq.max_num_tokens - seq.num_tokens - 1)
            state = _state_of(seq, config)
            guess = state.index.propose(seq.token_ids, room)
            guesses.append(guess)
            if not guess:
                continue
            state.fade()
            acceptance = state.acceptance
            worth = 1.0
            for depth in range(1, len(guess) + 1):
                worth *= acceptance
                candidates.append((worth, depth, row))
        if not candidates:
            return None
        # The most likely draft tokens first; a sequence's deeper tokens are never more
        # likely than its shallower ones, so every sequence takes a prefix of its guess.
        candidates.sort(key=lambda candidate: (-candidate[0], candidate[1]))
        lengths = [0] * batch
        tokens, cost = float(batch), 1.0 + config.row_cost * (batch - 1)
        for worth, _, row in candidates:
            if worth * cost <= config.row_cost * tokens:
                break
            lengths[row] += 1
            tokens += worth
            cost += config.row_cost
        drafts: list[list[int]] = []
        for seq, guess, length in zip(seqs, guesses, lengths, strict=True):
            length = self.block_manager.reserve_slots(seq, length) if length else 0
            drafts.append(guess[:length])
        if not any(drafts):
            return None
        self.stats.steps += 1
        return drafts

    def record(self, seq: Sequence, num_drafted: int, num_kept: int, refused: bool) -> None:
        """What the sampler made of the sequence's draft of this step: how many tokens it
        kept, and whether it then refused one (not so where the sequence ended first)."""
        if not num_drafted:
            return
        state = _state_of(seq, self.config)
        state.kept += num_kept
        state.judged += num_kept + refused
        self.stats.draft_tokens += num_drafted
        self.stats.accepted_tokens += num_kept


def _state_of(seq: Sequence, config: SpeculationConfig) -> DraftState:
    if seq.draft_state is None:
        seq.draft_state = DraftState(config.min_ngram, config.max_ngram)
    return seq.draft_state
