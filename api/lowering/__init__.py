"""From an accepted body to the RequestAccepted event workers run: earlier turns, files,
sealed reasoning, compaction, tools and the answer's constraint, lowered."""
