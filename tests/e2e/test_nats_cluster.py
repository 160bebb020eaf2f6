"""A three-node JetStream cluster with every stream and bucket replicated three times:
killing the node that leads the events stream mid-stream loses nothing, and every open
response completes intact."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import nats

from cli.nats_server import free_port
from events.subjects import EVENTS_STREAM
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT
from tests.nats_cluster import NatsCluster
from tests.processes import SpateProcess, wait_http

STREAMS = 4
TOKENS = 60


def events_leader(url: str) -> str:
    async def leader() -> str:
        nc = await nats.connect(url.split(","))
        try:
            for _ in range(40):  # right after a node died, the stream may be electing
                try:
                    info = await nc.jetstream(timeout=2).stream_info(EVENTS_STREAM)
                except Exception:
                    await asyncio.sleep(0.5)
                    continue
                assert info.config.num_replicas == 3
                if info.cluster is not None and info.cluster.leader:
                    return str(info.cluster.leader)
                await asyncio.sleep(0.5)
            raise TimeoutError("the events stream has no leader")
        finally:
            await nc.close()

    return asyncio.run(leader())


def stream(base_url: str, index: int, events: list[dict[str, Any]], started: threading.Event) -> None:
    body = {"model": DEFAULT_MODEL, "input": f"Write a long story about the sea, number {index}.",
            "temperature": 0, "max_output_tokens": TOKENS, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/responses", json=body, timeout=300) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[5:]))
                if events[-1]["type"] == "response.output_text.delta":
                    started.set()


def test_streams_survive_the_events_leader_dying() -> None:
    with NatsCluster(3) as cluster:
        env = {"SPATE_NATS_URL": cluster.url, "SPATE_STREAM_REPLICAS": "3"}
        port = free_port()
        api = SpateProcess(["api", "--port", str(port)], env, "cluster-api")
        worker = SpateProcess(["worker", "--model", DEFAULT_MODEL, "--max-num-seqs", "8"],
                              {**env, "SPATE_WORKER_ID": "cluster-worker"}, "cluster-worker")
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base_url}/ready", worker, timeout=MODEL_LOAD_TIMEOUT)
            results: list[list[dict[str, Any]]] = [[] for _ in range(STREAMS)]
            started = [threading.Event() for _ in range(STREAMS)]
            threads = [threading.Thread(target=stream, args=(base_url, i, results[i], started[i]))
                       for i in range(STREAMS)]
            for thread in threads:
                thread.start()
            assert all(event.wait(120) for event in started)
            leader = events_leader(cluster.url)
            cluster.kill(leader)
            killed = time.monotonic()
            for thread in threads:
                thread.join(timeout=300)
            print(f"{STREAMS} streams ended {time.monotonic() - killed:.1f} s after killing "
                  f"the events leader {leader}")
            for events in results:
                assert [e["sequence_number"] for e in events] == list(range(len(events)))
                assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
                final = events[-1]["response"]
                text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
                assert text == final["output"][0]["content"][0]["text"]
            assert events_leader(cluster.url) != leader
        finally:
            api.stop()
            worker.stop()
