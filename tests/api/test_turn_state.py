"""x-codex-turn-state: a token opens only for its owner and only as it was issued (sealed
under the API's key, or marked unsealed where there is none), anything else is ignored;
a create that follows a turn goes to the worker the token names while it is alive, else
to the same live worker on every router, and its turn beats the cache holder."""

from __future__ import annotations

import base64
import json

import pytest

from api.cache_router import CacheRouter
from api.lowering.encrypted_content import ContentKeys, new_key
from api.lowering.turn_state import MAX_TOKEN_CHARS, TurnState, issue, read
from events import ChatMessage, RequestAccepted
from journal.routing import CacheReport, prefix_digests

SEALED = ContentKeys([new_key()])
UNSEALED = ContentKeys([])


@pytest.mark.parametrize("keys", [SEALED, UNSEALED], ids=["sealed", "unsealed"])
def test_a_token_opens_for_its_owner_only(keys: ContentKeys) -> None:
    token = issue(keys, "alice", TurnState("t1", "worker-a"))
    assert len(token) < MAX_TOKEN_CHARS
    assert read(keys, "alice", token) == TurnState("t1", "worker-a")
    assert read(keys, "bob", token) is None
    assert read(keys, "alice", issue(keys, "alice", TurnState("t2"))) == TurnState("t2", None)


@pytest.mark.parametrize("token", [
    None, "", "garbage", "spate0.", "spate0.!!!", "spate1.AAAA", "x" * (MAX_TOKEN_CHARS + 1),
    "spate0." + base64.urlsafe_b64encode(b"[1, 2]").decode(),
    "spate0." + base64.urlsafe_b64encode(json.dumps({"t": 5, "o": "alice"}).encode()).decode(),
])
def test_a_malformed_token_is_ignored(token: str | None) -> None:
    for keys in (SEALED, UNSEALED):
        assert read(keys, "alice", token) is None


def test_with_a_key_an_unsealed_token_is_refused_and_another_keys_token_too() -> None:
    forged = issue(UNSEALED, "alice", TurnState("t1", "worker-a"))
    assert read(SEALED, "alice", forged) is None
    other = ContentKeys([new_key()])
    assert read(SEALED, "alice", issue(other, "alice", TurnState("t1"))) is None
    altered = issue(SEALED, "alice", TurnState("t1"))
    assert read(SEALED, "alice", altered[:-4] + ("AAAA" if altered[-4:] != "AAAA" else "BBBB")) is None
    # The worker id is carried only while short: the turn key alone routes a long one.
    assert read(SEALED, "alice", issue(SEALED, "alice", TurnState("t1", "w" * 500))) == TurnState("t1")


def event(response_id: str, texts: list[str]) -> RequestAccepted:
    return RequestAccepted(response_id=response_id, seq=0, model="m", owner="o",
                           messages=tuple(ChatMessage(role="user", content=t) for t in texts))


def router(*workers: str) -> CacheRouter:
    routing = CacheRouter(max_skew=2, stale_s=60)
    for worker in workers:
        routing.observe(CacheReport("m", worker, 0))
    return routing


def test_a_turn_goes_to_its_named_worker_over_the_cache_holder() -> None:
    routing = router("a", "b")
    routing.observe(CacheReport("m", "a", 0, prefix_digests(event("r0", ["x"]))))
    routing.follow_turn("r1", "t1", "b")
    assert routing.choose(event("r1", ["x", "y"])) == "b"
    assert routing.chosen_for("r1") == "b" and routing.chosen_for("r1") is None
    # Without the turn the holder gets it, and the choice is read once.
    assert routing.choose(event("r2", ["x", "y"])) == "a"
    assert routing.chosen_for("r2") == "a"


def test_a_turn_whose_worker_is_gone_goes_to_the_same_pick_on_every_router() -> None:
    picks = set()
    for order in (("a", "b", "c"), ("c", "b", "a")):
        routing = router(*order)
        routing.follow_turn("r1", "t1", "gone")
        routing.follow_turn("r2", "t1", None)
        first, second = routing.choose(event("r1", ["x"])), routing.choose(event("r2", ["y"]))
        assert first == second
        picks.add(first)
    assert len(picks) == 1
    # Turns spread over the workers.
    routing = router("a", "b", "c")
    spread = set()
    for index in range(30):
        routing.follow_turn(f"s{index}", f"turn-{index}", None)
        spread.add(routing.choose(event(f"s{index}", ["x"])))
    assert spread == {"a", "b", "c"}


def test_with_one_live_worker_a_turn_takes_the_shared_queue() -> None:
    routing = router("a")
    routing.follow_turn("r1", "t1", "a")
    assert routing.choose(event("r1", ["x"])) is None
