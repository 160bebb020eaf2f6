"""A worker's own bounds against real processes: a worker of the default model started
with SPATE_MAX_NUM_SEQS=1 and SPATE_MAX_WAITING=1, an API (routing off, so every
request goes through the shared queue) and the session's nats-server. Given four
requests at once, the worker runs one, holds one more waiting in its scheduler, and
leaves the rest in the queue until it has room; all four are answered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from cli.nats_server import EmbeddedNats, free_port
from events.subjects import REQUESTS_STREAM, worker_consumer
from journal import Journal, JournalSettings
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT
from tests.processes import SpateProcess, wait_http

MODEL = "one-at-a-time"
MAX_NUM_SEQS = 1
MAX_WAITING = 1
REQUESTS = 4


@pytest.fixture(scope="module")
def one_at_a_time(nats_server: EmbeddedNats) -> Iterator[tuple[str, str]]:
    port, metrics_port = free_port(), free_port()
    env = {"SPATE_NATS_URL": nats_server.url}
    api = SpateProcess(["api", "--port", str(port)], {**env, "SPATE_ROUTING": "false"},
                       "bounds-api")
    worker = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", MODEL,
         "--metrics-port", str(metrics_port)],
        {**env, "SPATE_WORKER_ID": "bounds-worker", "SPATE_MAX_NUM_SEQS": str(MAX_NUM_SEQS),
         "SPATE_MAX_WAITING": str(MAX_WAITING)}, "bounds-worker")
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_http(f"{base_url}/health", api, timeout=60)
        deadline = time.monotonic() + MODEL_LOAD_TIMEOUT
        while MODEL not in httpx.get(f"{base_url}/v1/models", timeout=10).text:
            if not worker.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not come up:\n{worker.output()[-3000:]}")
            time.sleep(0.5)
        yield base_url, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        api.stop()
        worker.stop()


def gauge(metrics: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith(name + " "))


async def test_a_worker_runs_and_holds_no_more_than_its_bounds(
    one_at_a_time: tuple[str, str], nats_server: EmbeddedNats,
) -> None:
    base_url, metrics_url = one_at_a_time
    journal = Journal(JournalSettings(nats_url=nats_server.url), name="bounds-observer")
    journal.start()
    assert await asyncio.wait_for(journal.wait_connected(), 30)
    js = journal.connection.require()
    seen = {"running": 0.0, "waiting": 0.0, "taken": 0, "queued": 0}

    async def observe(client: httpx.AsyncClient) -> None:
        while True:
            metrics = (await client.get(metrics_url)).text
            seen["running"] = max(seen["running"], gauge(metrics, "spate_worker_running_sequences"))
            seen["waiting"] = max(seen["waiting"], gauge(metrics, "spate_worker_waiting_sequences"))
            info = await js.consumer_info(REQUESTS_STREAM, worker_consumer(MODEL))
            seen["taken"] = max(seen["taken"], info.num_ack_pending)
            seen["queued"] = max(seen["queued"], info.num_pending)
            await asyncio.sleep(0.05)

    body = {"model": MODEL, "max_output_tokens": 24, "ignore_eos": True, "temperature": 0}
    try:
        async with httpx.AsyncClient(timeout=300) as client:
            watcher = asyncio.create_task(observe(client))
            try:
                replies = await asyncio.gather(*(
                    client.post(f"{base_url}/v1/responses",
                                json={**body, "input": f"Count to {n}."})
                    for n in range(REQUESTS)))
            finally:
                watcher.cancel()
            assert not watcher.done() or watcher.cancelled(), watcher.exception()
    finally:
        await journal.close()
    assert all(reply.status_code == 200 for reply in replies), [r.text for r in replies]
    assert all(reply.json()["usage"]["output_tokens"] == 24 for reply in replies)
    assert seen["running"] <= MAX_NUM_SEQS and seen["waiting"] <= MAX_WAITING, seen
    # Taken from the queue: never more than the two bounds together, and the rest waited
    # in the queue rather than in the worker.
    assert 0 < seen["taken"] <= MAX_NUM_SEQS + MAX_WAITING, seen
    assert seen["queued"] >= 1, seen
