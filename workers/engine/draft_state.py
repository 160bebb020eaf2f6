"""What one sequence has learned about its prompt-lookup guesses: its n-gram index and how
often its verified guesses were kept. Kept below the `Sequence` that holds it, so the
sequence never imports the speculation code that reads it (workers/engine/speculation.py)."""

from __future__ import annotations

from workers.engine.ngram_proposer import NgramIndex

# What a sequence's guesses are believed to be worth before any is verified (as if
# ACCEPTANCE_PRIOR_WEIGHT guesses had been, that often kept): optimistic enough that a
# sequence in a batch of 8 still tries a one-token draft.
ACCEPTANCE_PRIOR = 0.8
ACCEPTANCE_PRIOR_WEIGHT = 2.0
# Each step a sequence could draft, its evidence so far counts this much less, so a
# sequence that stopped drafting after misses tries again some tens of steps later (its
# text may have turned to quoting).
ACCEPTANCE_MEMORY = 0.95


class DraftState:
    """One sequence's n-gram index and how often its verified guesses were kept."""

    __slots__ = ("index", "kept", "judged")

    def __init__(self, min_ngram: int, max_ngram: int) -> None:
        self.index = NgramIndex(min_ngram, max_ngram)
        # Draft tokens kept, and draft tokens the sampler ruled on (kept or the first
        # refused), both fading by ACCEPTANCE_MEMORY.
        self.kept = 0.0
        self.judged = 0.0

    def fade(self) -> None:
        """A step the sequence could draft: what it learned so far counts a little less."""
        self.kept *= ACCEPTANCE_MEMORY
        self.judged *= ACCEPTANCE_MEMORY

    @property
    def acceptance(self) -> float:
        """The chance that the next draft token is kept, given the one before it was."""
        return (self.kept + ACCEPTANCE_PRIOR * ACCEPTANCE_PRIOR_WEIGHT) / (
            self.judged + ACCEPTANCE_PRIOR_WEIGHT
        )
