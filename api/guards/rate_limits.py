"""Rate limits a client can read: which budget a request spends (its key group's, else its
key's own), the x-ratelimit-* headers that say where the budget stands, and the 429 past
it. The budgets are GCRA states (api/guards/gcra.py) in the journal's RATE_LIMITS bucket,
so every API replica spends the same ones.

A create is charged one request and an estimate of its tokens at admission; the estimate
is trued up to the response's usage when the replica that serves it sees it end, and a
request refused after the charge (another bound, a publish that failed) is given back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from api.errors import APIError
from api.guards import gcra
from api.guards.owner import key_owner
from api.settings import ApiSettings
from events import RequestAccepted
from events.generation import Usage
from journal import ContentionExceeded, JournalUnavailable, RateLimitStates

log = logging.getLogger("spate.api")

REQUESTS = "requests"
TOKENS = "tokens"
# An estimate's characters per token (docs/api.md, "Rate limits").
CHARS_PER_TOKEN = 4
_NAMES = {REQUESTS: "requests per min (RPM)", TOKENS: "tokens per min (TPM)"}


@dataclass(frozen=True, slots=True)
class Limits:
    """The budget a request spends: its state's key in the bucket, who it belongs to in
    words, and its limits a minute (0: none of that kind)."""

    subject: str
    whom: str
    rpm: int
    tpm: int


def estimated_tokens(event: RequestAccepted) -> int:
    """What a create is charged in tokens before it runs: its input's characters (each
    message's text, reasoning and tool calls, and the tools' names, descriptions and
    schemas) over four, rounded up, plus `max_output_tokens` when the request sets it."""
    chars = 0
    for message in event.messages:
        chars += len(message.content) + len(message.reasoning or "")
        chars += sum(len(call.name) + len(call.arguments) for call in message.tool_calls)
    for tool in event.tools:
        chars += len(tool.model_dump_json(include={"name", "description", "parameters"}))
    return math.ceil(chars / CHARS_PER_TOKEN) + (event.sampling.max_output_tokens or 0)


class RateLimiter:
    """Every key's budget as this replica spends it; a group is found by the owner a
    request acts for, each of its keys' digests."""

    def __init__(self, settings: ApiSettings, states: RateLimitStates) -> None:
        self._states = states
        self._default_rpm = settings.key_rpm
        self._default_tpm = settings.key_tpm
        self._groups = {
            key_owner(key): Limits(f"group.{name}", f"key group '{name}'", group.rpm, group.tpm)
            for name, group in settings.rate_limits.items() for key in group.keys
        }
        self._failing = False
        # True-ups and refunds run after their reply; held here until done.
        self._pending: set[asyncio.Task[None]] = set()

    def limits_for(self, owner: str) -> Limits | None:
        """The budget `owner`'s requests spend; None when no limit applies to it."""
        limits = self._groups.get(owner) or Limits(
            f"key.{owner}", "this API key", self._default_rpm, self._default_tpm)
        return limits if limits.rpm or limits.tpm else None

    async def admit(self, event: RequestAccepted) -> Charge | None:
        """Charge one create to its owner's budget, or raise the 429 that says which limit
        it is past; None when no limit applies (or the bucket cannot be reached: a
        limiter that cannot count lets requests through, and says so once)."""
        limits = self.limits_for(event.owner or "")
        if limits is None:
            return None
        spends = _spends(limits, estimated_tokens(event))
        now = time.time()

        def step(state: bytes | None) -> tuple[bytes | None, gcra.Decision]:
            tats, decision = gcra.take(gcra.load(state), spends, now)
            return (gcra.dump(tats) if decision.allowed else None), decision

        try:
            decision = await self._states.change(limits.subject, step)
        except ContentionExceeded:
            raise APIError(429, f"Too many requests at once for {limits.whom}; retry shortly.",
                           code="rate_limit_exceeded",
                           headers={"Retry-After": "1", "retry-after-ms": "1000"}) from None
        except JournalUnavailable as error:
            self._fail_open(error)
            return None
        self._counting_again()
        headers = rate_limit_headers(decision)
        if not decision.allowed:
            raise _refusal(limits, decision, headers)
        return Charge(self, limits, spends, headers)

    def change_soon(self, limits: Limits, units: dict[str, int]) -> None:
        """Charge (or give back, negative) `units` of each budget, in the background."""
        self._keep(self._change(limits, units))

    async def _change(self, limits: Limits, units: dict[str, int]) -> None:
        now = time.time()
        budgets = {REQUESTS: limits.rpm, TOKENS: limits.tpm}

        def step(state: bytes | None) -> tuple[bytes | None, None]:
            tats = gcra.load(state)
            for name, count in units.items():
                if count and budgets[name]:
                    tats = gcra.adjust(tats, name, budgets[name], count, now)
            return gcra.dump(tats), None

        try:
            await self._states.change(limits.subject, step)
        except (ContentionExceeded, JournalUnavailable) as error:
            log.warning("could not true up the rate limit of %s: %s", limits.whom, error)

    async def settled(self) -> None:
        """Until every true-up and refund started so far has been written (or given up)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def _keep(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _fail_open(self, error: Exception) -> None:
        if not self._failing:
            self._failing = True
            log.warning("rate limits are not enforced while their state cannot be reached "
                        "(%s): requests go through uncounted", error)

    def _counting_again(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("rate limits are enforced again")


class Charge:
    """One admitted create's spend: the headers its reply carries, and the true-up or
    refund once its outcome is known (each at most once)."""

    def __init__(self, limiter: RateLimiter, limits: Limits, spends: list[gcra.Spend],
                 headers: dict[str, str]) -> None:
        self.headers = headers
        self._limiter = limiter
        self._limits = limits
        self._estimate = next((spend.cost for spend in spends if spend.name == TOKENS), 0)
        self._settled = False

    def refund(self) -> None:
        """The create never ran (refused later, or not published): give all of it back."""
        if not self._settle():
            self._limiter.change_soon(self._limits, {REQUESTS: -1, TOKENS: -self._estimate})

    def true_up(self, usage: Usage | None) -> None:
        """The response ended with `usage` (None: no usage was seen, and the estimate
        stands): charge or give back the difference."""
        if self._settle() or usage is None:
            return
        actual = usage.input_tokens + usage.output_tokens
        if actual != self._estimate:
            self._limiter.change_soon(self._limits, {TOKENS: actual - self._estimate})

    def _settle(self) -> bool:
        """Whether it was settled already; it is from now on."""
        settled, self._settled = self._settled, True
        return settled


def _spends(limits: Limits, tokens: int) -> list[gcra.Spend]:
    spends = []
    if limits.rpm:
        spends.append(gcra.Spend(REQUESTS, limits.rpm, 1))
    if limits.tpm:
        spends.append(gcra.Spend(TOKENS, limits.tpm, tokens))
    return spends


def rate_limit_headers(decision: gcra.Decision) -> dict[str, str]:
    """x-ratelimit-limit-*, -remaining-* and -reset-* for each limited budget, as OpenAI
    sends them."""
    headers = {}
    for name, budget in decision.budgets.items():
        headers[f"x-ratelimit-limit-{name}"] = str(budget.limit)
        headers[f"x-ratelimit-remaining-{name}"] = str(budget.remaining)
        headers[f"x-ratelimit-reset-{name}"] = gcra.duration(budget.reset_s)
    return headers


def _refusal(limits: Limits, decision: gcra.Decision, headers: dict[str, str]) -> APIError:
    spend = decision.refused_by
    if spend is None:
        raise ValueError("a refusal names the budget that refused it")
    where = f"on {_NAMES[spend.name]} for {limits.whom}: Limit {spend.limit}, Requested {spend.cost}."
    if decision.retry_after_s is None:
        return APIError(429, f"Request too large {where} The input or max_output_tokens must be "
                        "reduced in order to run successfully.", code="rate_limit_exceeded",
                        headers=headers)
    wait_ms = max(1, math.ceil(decision.retry_after_s * 1000))
    return APIError(
        429, f"Rate limit reached {where} Please try again in {gcra.duration(wait_ms / 1000)}.",
        code="rate_limit_exceeded",
        headers={**headers, "Retry-After": str(max(1, math.ceil(wait_ms / 1000))),
                 "retry-after-ms": str(wait_ms)})


def label(error: BaseException, charge: Charge | None) -> None:
    """An APIError answering a charged create carries the charge's headers too."""
    if charge is not None and isinstance(error, APIError):
        error.headers = {**charge.headers, **(error.headers or {})}
