"""GCRA budgets: a full budget spends at once and refills evenly, a refusal spends nothing
and says how long until the request fits, adjustments never make a budget more than
whole, and reset durations are written as OpenAI writes them."""

from __future__ import annotations

import pytest

from api.guards.gcra import WINDOW_S, Spend, adjust, dump, duration, load, take

NOW = 1_000_000.0


def test_a_full_budget_is_spent_at_once_then_refused_with_the_wait() -> None:
    requests = [Spend("requests", 3, 1)]
    tats: dict[str, float] = {}
    remaining = []
    for _ in range(3):
        tats, decision = take(tats, requests, NOW)
        assert decision.allowed
        remaining.append(decision.budgets["requests"].remaining)
    assert remaining == [2, 1, 0]
    assert decision.budgets["requests"].reset_s == pytest.approx(WINDOW_S)
    after, refused = take(tats, requests, NOW)
    assert not refused.allowed and after == tats
    assert refused.refused_by == requests[0]
    assert refused.retry_after_s == pytest.approx(20.0)  # one request's interval
    # It refills evenly: one request's worth after 20 s.
    tats, later = take(tats, requests, NOW + 20.0)
    assert later.allowed and later.budgets["requests"].remaining == 0


def test_both_budgets_or_neither() -> None:
    spends = [Spend("requests", 10, 1), Spend("tokens", 100, 80)]
    tats, first = take({}, spends, NOW)
    assert first.allowed
    assert first.budgets["tokens"].remaining == 20
    again, second = take(tats, spends, NOW)
    assert not second.allowed and second.refused_by == spends[1]
    assert again == tats  # the request budget is untouched by the refusal
    assert second.budgets["requests"].remaining == 9
    assert second.retry_after_s == pytest.approx(60 * 60 / 100)  # 60 tokens at 0.6 s each


def test_a_cost_over_the_limit_never_fits() -> None:
    _, decision = take({}, [Spend("tokens", 100, 101)], NOW)
    assert not decision.allowed and decision.retry_after_s is None


def test_adjust_charges_and_gives_back_no_more_than_whole() -> None:
    tats, _ = take({}, [Spend("tokens", 60, 30)], NOW)
    charged = adjust(tats, "tokens", 60, 10, NOW)
    assert charged["tokens"] == pytest.approx(NOW + 40)
    refunded = adjust(charged, "tokens", 60, -1000, NOW)
    assert refunded["tokens"] == NOW
    _, decision = take(refunded, [Spend("tokens", 60, 60)], NOW)
    assert decision.allowed


def test_states_round_trip_and_bad_ones_are_whole_budgets() -> None:
    assert load(dump({"requests": NOW})) == {"requests": NOW}
    assert load(None) == load(b"") == load(b"not json") == load(b"[1]") == {}


@pytest.mark.parametrize(("seconds", "written"), [
    (0, "0s"), (0.0004, "1ms"), (0.02, "20ms"), (1, "1s"), (1.5, "1.5s"), (8.64, "8.64s"),
    (60, "1m0s"), (360, "6m0s"), (61.25, "1m1.25s"), (3723, "1h2m3s"),
])
def test_durations_as_openai_writes_them(seconds: float, written: str) -> None:
    assert duration(seconds) == written
