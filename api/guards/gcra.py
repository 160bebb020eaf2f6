"""Per-minute budgets as the generic cell rate algorithm (GCRA) keeps them: one number per
budget, the theoretical arrival time (TAT) of the next unit, from which what is left and
when it is whole again both follow. A budget of L a minute earns one unit every 60/L
seconds and holds at most L, so a full budget may be spent at once and refills evenly.
Pure functions over wall-clock seconds; journal/rate_limits.py stores the states and
api/guards/rate_limits.py says whose budget a request spends.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

WINDOW_S = 60.0
# Floating-point slack: a unit that is due is not refused for a rounding error.
_SLACK_S = 1e-6


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget after a decision: its limit a minute, what is left of it, and how long
    until it is whole again."""

    limit: int
    remaining: int
    reset_s: float


@dataclass(frozen=True, slots=True)
class Spend:
    """What one dimension (requests or tokens) of a request asks for: `cost` units of a
    budget of `limit` a minute."""

    name: str
    limit: int
    cost: int

    @property
    def interval_s(self) -> float:
        return WINDOW_S / self.limit


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a request may spend its budgets, each budget as it then stands, and for a
    refusal which budget refused it and how long until it fits (None: it never will, its
    cost being over the limit)."""

    allowed: bool
    budgets: dict[str, Budget]
    refused_by: Spend | None = None
    retry_after_s: float | None = None


def load(state: bytes | None) -> dict[str, float]:
    """A stored state: each budget's TAT by name; an unreadable one is a full budget."""
    if not state:
        return {}
    try:
        loaded = json.loads(state)
    except ValueError:
        return {}
    return {name: float(tat) for name, tat in loaded.items()} if isinstance(loaded, dict) else {}


def dump(tats: dict[str, float]) -> bytes:
    return json.dumps(tats, separators=(",", ":"), sort_keys=True).encode()


def take(tats: dict[str, float], spends: list[Spend], now: float) -> tuple[dict[str, float], Decision]:
    """Spend every one of `spends` at `now`, or none of them: the new TATs (unchanged on a
    refusal) and the decision."""
    new = dict(tats)
    refused: list[tuple[Spend, float | None]] = []
    for spend in spends:
        after = max(tats.get(spend.name, now), now) + spend.cost * spend.interval_s
        if spend.cost > spend.limit:
            refused.append((spend, None))
        elif after - now > WINDOW_S + _SLACK_S:
            refused.append((spend, after - now - WINDOW_S))
        else:
            new[spend.name] = after
    if not refused:
        return new, Decision(True, {spend.name: _budget(spend, new[spend.name], now)
                                    for spend in spends})
    # Nothing is spent: each budget as it stood.
    budgets = {spend.name: _budget(spend, tats.get(spend.name, now), now) for spend in spends}
    never = [spend for spend, wait in refused if wait is None]
    if never:
        return dict(tats), Decision(False, budgets, never[0], None)
    spend, wait = max(refused, key=lambda refusal: refusal[1] or 0.0)
    return dict(tats), Decision(False, budgets, spend, wait)


def adjust(tats: dict[str, float], name: str, limit: int, units: int, now: float) -> dict[str, float]:
    """Charge `units` more to one budget (or give back, for a negative count: never more
    than makes it whole)."""
    interval = WINDOW_S / limit
    start = max(tats.get(name, now), now)
    return {**tats, name: max(start + units * interval, now)}


def _budget(spend: Spend, tat: float, now: float) -> Budget:
    used_s = max(tat - now, 0.0)
    remaining = math.floor((WINDOW_S - used_s) / spend.interval_s + _SLACK_S)
    return Budget(spend.limit, max(0, min(spend.limit, remaining)), used_s)


def duration(seconds: float) -> str:
    """A duration as OpenAI's x-ratelimit-reset-* headers write it (Go's form): `20ms`,
    `1s`, `1.5s`, `6m0s`, `1h2m3s`; whole milliseconds, rounded up."""
    millis = math.ceil(max(seconds, 0.0) * 1000 - 1e-6)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    secs = f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") if fraction else str(whole)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
