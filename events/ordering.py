"""Putting a response's events back in `seq` order as they are read.

A retried publish can land after later events; readers hold early arrivals until the
gap closes, and drop repeats, so the fold always sees seq 0, 1, 2, ...
"""

from __future__ import annotations

from typing import Any


class SeqOrder:
    def __init__(self, next_seq: int = 0) -> None:
        self.next_seq = next_seq
        self._held: dict[int, Any] = {}

    def push(self, event: Any) -> list[Any]:
        """Accept one event; return the events that are now ready, in order."""
        if event.seq < self.next_seq or event.seq in self._held:
            return []
        self._held[event.seq] = event
        ready = []
        while self.next_seq in self._held:
            ready.append(self._held.pop(self.next_seq))
            self.next_seq += 1
        return ready

    @property
    def waiting(self) -> int:
        return len(self._held)
