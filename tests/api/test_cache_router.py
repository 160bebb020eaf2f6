"""The router's choice from the cache reports it has seen: the longest held prefix, a
prompt_cache_key scoped by owner, and the bound on a busy holder."""

from __future__ import annotations

from api.cache_router import CacheRouter
from events import ChatMessage, RequestAccepted
from journal.routing import CacheReport, prefix_digests


def event(texts: list[str], owner: str = "o", key: str | None = None) -> RequestAccepted:
    return RequestAccepted(
        response_id="resp_r", seq=0, model="m", owner=owner, prompt_cache_key=key,
        messages=tuple(ChatMessage(role="user", content=text) for text in texts),
    )


def router(*loads: tuple[str, int]) -> CacheRouter:
    routing = CacheRouter(max_skew=2, stale_s=60)
    for worker, in_flight in loads:
        routing.observe(CacheReport("m", worker, in_flight))
    return routing


def test_the_longest_held_prefix_wins() -> None:
    routing = router(("a", 0), ("b", 0))
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event(["x"]))))
    routing.observe(CacheReport("m", "b", 0, prefix_digests(event(["p", "y"]))))
    assert routing.choose(event(["p", "y", "z"])) == "b"
    assert routing.choose(event(["p", "q"])) == "b"
    assert routing.choose(event(["x", "q"])) == "a"
    assert routing.choose(event(["other"])) is None


def test_a_prompt_cache_key_is_scoped_by_owner() -> None:
    routing = router(("a", 0), ("b", 0))
    routing.observe(CacheReport("m", "b", 0, prefix_digests(event(["x"], key="k"))))
    assert routing.choose(event(["new"], key="k")) == "b"
    assert routing.choose(event(["new"], owner="someone-else", key="k")) is None


def test_a_busy_holder_is_passed_over() -> None:
    routing = router(("a", 0), ("b", 0))
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event(["x"]))))
    # Routed requests count before the holder reports them: two, then the bound.
    assert [routing.choose(event(["x"])) for _ in range(3)] == ["a", "a", None]
    routing.observe(CacheReport("m", "b", 3))
    assert routing.choose(event(["x"])) == "a"


def test_one_live_worker_or_a_silent_holder_is_not_routed_to() -> None:
    routing = router(("a", 0))
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event(["x"]))))
    assert routing.choose(event(["x"])) is None


def test_a_longer_held_prefix_allows_more_skew() -> None:
    """A chain's history of about 1,100 tokens is worth two more requests of waiting on its
    holder (one per 512 tokens here: SPATE_ROUTE_TOKENS_PER_SKEW) before it goes to the
    shared queue."""
    routing = CacheRouter(max_skew=2, stale_s=60, tokens_per_skew=512)
    history = ["h" * 4400]
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event(history))))
    routing.observe(CacheReport("m", "b", 0))
    turns = [routing.choose(event([*history, f"turn {n}"])) for n in range(5)]
    assert turns == ["a", "a", "a", "a", None]
    # The same holder with only a short prefix in common keeps the plain bound.
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event(["short"]))))
    assert [routing.choose(event(["short", f"q{n}"])) for n in range(3)] == ["a", "a", None]
