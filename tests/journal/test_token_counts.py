"""Input token counts over a real nats-server: one worker of the queue group answers,
a refusal comes back with its code and param, and nobody serving the model is a refusal."""

from __future__ import annotations

import pytest

from events import RequestAccepted
from journal import CountRefused, Journal
from tests.journal.test_log_reader import request


async def test_a_count_is_answered_by_one_worker(journal: Journal) -> None:
    asked: list[str] = []

    async def count(event: RequestAccepted) -> int:
        asked.append(event.response_id)
        return 42

    servers = [await journal.serve_counts("count-model", count) for _ in range(2)]
    try:
        assert await journal.count_input_tokens(request("resp_count", model="count-model")) == 42
        assert asked == ["resp_count"]
    finally:
        for server in servers:
            await server.close()


async def test_a_refusal_comes_back_as_one(journal: Journal) -> None:
    async def refuse(event: RequestAccepted) -> int:
        raise CountRefused("context_length_exceeded", "Too long.", "input")

    server = await journal.serve_counts("refusing-model", refuse)
    try:
        with pytest.raises(CountRefused) as refused:
            await journal.count_input_tokens(request("resp_refused", model="refusing-model"))
        assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "input")
    finally:
        await server.close()


async def test_no_worker_is_a_refusal_on_model(journal: Journal) -> None:
    with pytest.raises(CountRefused) as refused:
        await journal.count_input_tokens(request("resp_nobody", model="unserved-model"))
    assert (refused.value.code, refused.value.param) == ("model_unavailable", "model")
