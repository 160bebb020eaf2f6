"""The rate-limit policy against a real nats-server: which budget a key spends (its
group's, else its own), what a create is charged, the headers and the 429, the true-up
and the refund, and a limiter whose bucket cannot be reached letting requests through."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.errors import APIError
from api.guards.owner import key_owner
from api.guards.rate_limits import Charge, RateLimiter, estimated_tokens
from api.settings import ApiSettings
from cli.nats_server import EmbeddedNats, free_port
from events import RequestAccepted
from events.generation import Usage
from events.request import ChatMessage
from journal import Journal, JournalSettings
from tests.journal.conftest import connect

GROUPS = {"team": {"keys": ["key-a", "key-b"], "rpm": 2}}


def settings(**fields: object) -> ApiSettings:
    return ApiSettings(api_keys="key-a,key-b,key-c", **fields)  # type: ignore[arg-type]


def create(owner: str, text: str = "Hi", max_output_tokens: int | None = None) -> RequestAccepted:
    return RequestAccepted(response_id=f"resp_{owner}", seq=0, model="m", owner=owner,
                           messages=(ChatMessage(role="user", content=text),),
                           sampling={"max_output_tokens": max_output_tokens})


async def refused(limiter: RateLimiter, event: RequestAccepted) -> APIError:
    with pytest.raises(APIError) as refusal:
        await limiter.admit(event)
    assert refusal.value.status == 429 and refusal.value.code == "rate_limit_exceeded"
    return refusal.value


def test_the_estimate_is_characters_over_four_plus_max_output_tokens() -> None:
    assert estimated_tokens(create("o", "x" * 9)) == 3
    assert estimated_tokens(create("o", "x" * 8, max_output_tokens=16)) == 18


def test_groups_are_checked_at_start_without_saying_a_key() -> None:
    with pytest.raises(ValidationError, match=r"group 'team': keys\[1\] is not one of SPATE_API_KEYS") as bad:
        settings(rate_limits=json.dumps({"team": {"keys": ["key-a", "sk-secret"]}}))
    assert "sk-secret" not in str(bad.value.errors()[0]["msg"])
    with pytest.raises(ValidationError, match="is in group 'one' too"):
        settings(rate_limits=json.dumps({"one": {"keys": ["key-a"]}, "two": {"keys": ["key-a"]}}))
    with pytest.raises(ValidationError, match="not valid JSON"):
        settings(rate_limits="{nope")
    with pytest.raises(ValidationError, match="no file to read there"):
        settings(rate_limits="/nowhere/limits.json")
    with pytest.raises(ValidationError, match="rpm"):
        settings(rate_limits=json.dumps({"team": {"keys": ["key-a"], "rpm": -1}}))


def test_a_file_of_groups(tmp_path: Path) -> None:
    path = tmp_path / "limits.json"
    path.write_text(json.dumps(GROUPS))
    assert settings(rate_limits=str(path)).rate_limits["team"].rpm == 2


def test_which_budget_a_key_spends() -> None:
    limiter = RateLimiter(settings(rate_limits=json.dumps(GROUPS), key_tpm=100),
                          None)  # type: ignore[arg-type]
    team = limiter.limits_for(key_owner("key-a"))
    assert team == limiter.limits_for(key_owner("key-b"))
    assert team is not None and (team.subject, team.rpm, team.tpm) == ("group.team", 2, 0)
    own = limiter.limits_for(key_owner("key-c"))
    assert own is not None and (own.subject, own.rpm, own.tpm) == (f"key.{key_owner('key-c')}", 0, 100)
    unlimited = RateLimiter(settings(), None)  # type: ignore[arg-type]
    assert unlimited.limits_for(key_owner("key-c")) is None


async def test_headers_count_down_then_429_with_retry_after(nats_server: EmbeddedNats) -> None:
    journal = await connect(nats_server.url)
    try:
        limiter = RateLimiter(settings(rate_limits=json.dumps(GROUPS)), journal.rate_limits)
        first = await limiter.admit(create(key_owner("key-a")))
        second = await limiter.admit(create(key_owner("key-b")))  # the group's budget
        assert first is not None and second is not None
        assert first.headers == {"x-ratelimit-limit-requests": "2",
                                 "x-ratelimit-remaining-requests": "1",
                                 "x-ratelimit-reset-requests": "30s"}
        assert second.headers["x-ratelimit-remaining-requests"] == "0"
        error = await refused(limiter, create(key_owner("key-a")))
        assert "requests per min (RPM) for key group 'team': Limit 2" in error.message
        headers = dict(error.headers or {})
        assert 29 <= int(headers["Retry-After"]) <= 30
        assert 28_000 < int(headers["retry-after-ms"]) <= 30_000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        # A create that never ran gives its request back.
        second.refund()
        second.refund()  # once
        await limiter.settled()
        third = await limiter.admit(create(key_owner("key-a")))
        assert third is not None and third.headers["x-ratelimit-remaining-requests"] == "0"
    finally:
        await journal.close()


async def test_tokens_are_trued_up_to_the_usage(nats_server: EmbeddedNats) -> None:
    journal = await connect(nats_server.url)
    try:
        limiter = RateLimiter(settings(key_tpm=1000), journal.rate_limits)
        owner = key_owner("key-c")
        charge = await limiter.admit(create(owner, "x" * 400, max_output_tokens=500))
        assert isinstance(charge, Charge)
        assert charge.headers["x-ratelimit-remaining-tokens"] == "400"
        assert "x-ratelimit-limit-requests" not in charge.headers  # no RPM set
        charge.true_up(Usage(input_tokens=120, output_tokens=30))
        await limiter.settled()
        after = await limiter.admit(create(owner, "", max_output_tokens=None))
        assert after is not None
        # 150 spent in all (the true usage), give or take what refilled meanwhile.
        assert 850 <= int(after.headers["x-ratelimit-remaining-tokens"]) <= 860
        error = await refused(limiter, create(owner, "", max_output_tokens=1001))
        assert error.message.startswith("Request too large on tokens per min (TPM)")
        assert "Retry-After" not in (error.headers or {})
    finally:
        await journal.close()


async def test_an_unreachable_bucket_lets_requests_through_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = await connect_nowhere()
    try:
        limiter = RateLimiter(settings(key_rpm=1), journal.rate_limits)
        with caplog.at_level(logging.WARNING, logger="spate.api"):
            for _ in range(3):
                assert await limiter.admit(create(key_owner("key-c"))) is None
        warnings = [record for record in caplog.records if "not enforced" in record.message]
        assert len(warnings) == 1
    finally:
        await journal.close()


async def connect_nowhere() -> Journal:
    journal = Journal(JournalSettings(nats_url=f"nats://127.0.0.1:{free_port()}"), name="spate-api")
    journal.start()
    return journal
