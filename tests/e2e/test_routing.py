"""Routing that follows the cache, against real processes (NATS, an API, two workers):
a chain's next turn lands on the worker that ran the turn before; a routed request whose
worker died goes to the shared queue at its deadline and runs once; a busy holder does
not get everything."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import GenerationStarted
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.journal.conftest import connect
from tests.processes import SpateProcess, wait_for, wait_http

NAME = "routed-smollm"
ENV = {"SPATE_HEARTBEAT_S": "0.5", "SPATE_ROUTE_DEADLINE_S": "2", "SPATE_ROUTE_MAX_SKEW": "2"}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Stack, dict[str, SpateProcess]]]:
    with EmbeddedNats() as server:
        port = free_port()
        # Its router says why it sent each request where it did.
        api = SpateProcess(["api", "--port", str(port)],
                           {"SPATE_NATS_URL": server.url, "SPATE_LOG_LEVEL": "debug", **ENV},
                           "routing-api")
        workers = {wid: SpateProcess(
            ["worker", "--model", DEFAULT_MODEL, "--served-model-name", NAME,
             "--max-num-seqs", "4"],
            {"SPATE_NATS_URL": server.url, "SPATE_WORKER_ID": wid, **ENV}, wid,
        ) for wid in ("route-a", "route-b")}
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base_url}/health", api, timeout=60)
            for process in workers.values():
                assert wait_for(lambda p=process: "ready: serving" in p.output() or not p.alive(),
                                MODEL_LOAD_TIMEOUT, 0.5), process.output()[-3000:]
                assert process.alive(), process.output()[-3000:]
            yield Stack(server.url, base_url, api), workers
        finally:
            for process in workers.values():
                process.stop()
            api.stop()


def worker_of(stack: Stack, response_id: str) -> list[str]:
    async def read() -> list[Any]:
        journal = await connect(stack.nats_url, name="routing-test")
        try:
            return await journal.read_log(response_id)
        finally:
            await journal.close()

    return [e.worker_id for e in asyncio.run(read()) if isinstance(e, GenerationStarted)]


def routing_log(stack: Stack) -> str:
    return "\n".join(line for line in stack.api.output().splitlines()[-400:]
                     if "spate.api.router" in line)


def turn(stack: Stack, messages: list[dict[str, str]], tokens: int = 8,
         **fields: Any) -> dict[str, Any]:
    body = {"model": NAME, "input": messages, "temperature": 0, "max_output_tokens": tokens,
            **fields}
    reply = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def history(index: int) -> list[dict[str, str]]:
    words = " ".join(f"fact {index}.{n} is {n * index % 97}." for n in range(40))
    return [{"role": "user", "content": f"Chain {index}. Remember these: {words} Say ok."}]


def next_turn(messages: list[dict[str, str]], reply: dict[str, Any]) -> list[dict[str, str]]:
    text = reply["output"][-1]["content"][0]["text"]
    return [*messages, {"role": "assistant", "content": text},
            {"role": "user", "content": "And the next one?"}]


def test_a_chains_next_turn_lands_on_the_worker_of_the_turn_before(stack: Any) -> None:
    stack, _ = stack
    with ThreadPoolExecutor(6) as pool:  # at once: the shared queue spreads the first turns
        firsts = list(pool.map(lambda i: (history(i), turn(stack, history(i))), range(6)))
    holders = [worker_of(stack, reply["id"])[0] for _, reply in firsts]
    assert len(set(holders)) == 2, holders  # both hold some chains, so routing decides
    for (messages, reply), holder in zip(firsts, holders, strict=True):
        second = turn(stack, next_turn(messages, reply))
        assert worker_of(stack, second["id"]) == [holder], routing_log(stack)
        assert second["usage"]["input_tokens_details"]["cached_tokens"] > 0, second["usage"]


def test_a_prompt_cache_key_routes_across_different_prompts(stack: Any) -> None:
    stack, _ = stack
    first = turn(stack, history(100), prompt_cache_key="key-100")
    holder = worker_of(stack, first["id"])[0]
    for index in range(101, 105):
        reply = turn(stack, history(index), prompt_cache_key="key-100")
        assert worker_of(stack, reply["id"]) == [holder]


def test_a_busy_holder_does_not_get_everything(stack: Any) -> None:
    stack, _ = stack
    first = turn(stack, history(200))
    holder = worker_of(stack, first["id"])[0]
    follow = next_turn(history(200), first)
    with ThreadPoolExecutor(8) as pool:  # 8 long turns at once with one prefix
        replies = list(pool.map(lambda _: turn(stack, follow, tokens=48), range(8)))
    ran = [worker_of(stack, reply["id"]) for reply in replies]
    assert all(len(workers) == 1 for workers in ran), ran  # each ran once
    on_holder = sum(workers == [holder] for workers in ran)
    assert 2 <= on_holder < 8, ran


def test_a_routed_request_whose_worker_died_runs_elsewhere_once(stack: Any) -> None:
    stack, workers = stack
    first = turn(stack, history(300))
    holder = worker_of(stack, first["id"])[0]
    os.kill(workers[holder].process.pid, signal.SIGKILL)  # its router entry stays a while
    second = turn(stack, next_turn(history(300), first))
    other = next(wid for wid in workers if wid != holder)
    assert worker_of(stack, second["id"]) == [other]
    assert second["status"] in ("completed", "incomplete"), second  # 8 tokens at most
