"""Routing that follows the cache, with it on against off: concurrent multi-turn chains
on two workers, each turn resending the chain's history.

Real processes: nats-server, two workers with the default model, and two APIs on the
same NATS, one routing (SPATE_ROUTING=true) and one not; the same chains, each mode with
its own texts so neither reuses the other's cached prefixes. Reports, for turns 2 and
later, the prefix-cache hit rate (cached_tokens / input_tokens) and the median time to
first token, and how many requests each worker ran.

    .venv/bin/python benchmarks/bench_routing.py [--chains 16] [--turns 3] [--history 1000]
        [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import EmbeddedNats, free_port  # noqa: E402
from events import GenerationStarted  # noqa: E402
from journal import Journal, JournalSettings  # noqa: E402
from tests.processes import SpateProcess, wait_for, wait_http  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
# About 1.3 tokens a word for this model's tokenizer on these words.
WORDS = ("river stone lantern copper meadow harbor violet engine orchard signal "
         "granite ember willow canvas beacon marble thunder saddle").split()


@contextmanager
def stack() -> Iterator[tuple[str, str, str]]:
    """NATS, two workers and two APIs; yields NATS's URL and the routing and plain APIs'."""
    with EmbeddedNats() as nats:
        env = {"SPATE_NATS_URL": nats.url, "SPATE_HEARTBEAT_S": "0.5"}
        ports = free_port(), free_port()
        apis = [SpateProcess(["api", "--port", str(port)], {**env, "SPATE_ROUTING": routing},
                             f"routing-api-{routing}")
                for port, routing in zip(ports, ("true", "false"), strict=True)]
        workers = [SpateProcess(["worker", "--model", MODEL], {**env, "SPATE_WORKER_ID": wid},
                                wid) for wid in ("bench-a", "bench-b")]
        try:
            for process in workers:
                assert wait_for(lambda p=process: "ready: serving" in p.output() or not p.alive(),
                                900, 0.5), process.output()[-3000:]
            urls = [f"http://127.0.0.1:{port}" for port in ports]
            for url, api in zip(urls, apis, strict=True):
                wait_http(f"{url}/ready", api, timeout=120)
            time.sleep(2)  # the routing API has heard from both workers
            yield nats.url, urls[0], urls[1]
        finally:
            for process in [*workers, *apis]:
                process.stop()


def history(mode: str, chain: int, tokens: int) -> str:
    words = [WORDS[(chain * 7 + n * (chain + 3)) % len(WORDS)] for n in range(int(tokens / 1.3))]
    return f"[{mode} chain {chain}] Notes: {' '.join(words)}. Summarize the notes in one line."


async def one_turn(client: httpx.AsyncClient, base: str, messages: list[dict[str, str]],
                   tokens: int) -> tuple[float, dict[str, Any]]:
    """Time to the first output delta, and the completed response."""
    body = {"model": MODEL, "input": messages, "stream": True, "temperature": 0,
            "max_output_tokens": tokens}
    started = time.perf_counter()
    first = None
    async with client.stream("POST", f"{base}/v1/responses", json=body) as reply:
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[5:])
            if first is None and event["type"] == "response.output_text.delta":
                first = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                return (first if first is not None else time.perf_counter() - started,
                        event["response"])
    raise RuntimeError("the stream ended without a terminal event")


async def chain(client: httpx.AsyncClient, base: str, mode: str, index: int,
                turns: int, tokens: int, output: int) -> list[tuple[int, float, dict[str, Any]]]:
    messages = [{"role": "user", "content": history(mode, index, tokens)}]
    done = []
    for number in range(1, turns + 1):
        first, response = await one_turn(client, base, messages, output)
        done.append((number, first, response))
        text = "".join(part.get("text", "") for item in response["output"]
                       for part in item.get("content", []) if isinstance(part, dict))
        messages = [*messages, {"role": "assistant", "content": text or "ok"},
                    {"role": "user", "content": f"Now turn {number + 1}: one more line."}]
    return done


async def workers_of(nats_url: str, response_ids: list[str]) -> Counter[str]:
    journal = Journal(JournalSettings(nats_url=nats_url), name="bench-routing")
    journal.start()
    await journal.wait_connected()
    try:
        ran: Counter[str] = Counter()
        for response_id in response_ids:
            for event in await journal.read_log(response_id):
                if isinstance(event, GenerationStarted):
                    ran[event.worker_id] += 1
        return ran
    finally:
        await journal.close()


async def run_mode(base: str, mode: str, args: argparse.Namespace
                   ) -> list[tuple[int, float, dict[str, Any]]]:
    async with httpx.AsyncClient(timeout=1800) as client:
        chains = await asyncio.gather(*(
            chain(client, base, mode, index, args.turns, args.history, args.output)
            for index in range(args.chains)))
    return [turn for turns in chains for turn in turns]


async def summary(nats_url: str, turns: list[tuple[int, float, dict[str, Any]]]) -> dict[str, Any]:
    """Turns 2 and later of every round of one mode: hit rate, first token, workers."""
    later = [(first, response) for number, first, response in turns if number >= 2]
    cached = sum(r["usage"]["input_tokens_details"]["cached_tokens"] for _, r in later)
    total = sum(r["usage"]["input_tokens"] for _, r in later)
    ran = await workers_of(nats_url, [r["id"] for _, _, r in turns])
    by_turn = {number: statistics.median(first for n, first, _ in turns if n == number)
               for number in sorted({n for n, _, _ in turns})}
    return {"hit_rate": cached / total if total else 0.0,
            "ttft_p50_s": statistics.median(first for first, _ in later),
            "ttft_p50_s_by_turn": by_turn,
            "input_tokens": total, "per_worker": dict(sorted(ran.items()))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=16, help="chains run at once")
    parser.add_argument("--turns", type=int, default=3, help="turns in each chain")
    parser.add_argument("--history", type=int, default=1000, help="first turn's prompt tokens")
    parser.add_argument("--output", type=int, default=16, help="output tokens a turn")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of both modes, their order alternating (each its own texts)")
    args = parser.parse_args(argv)
    turns: dict[str, list[tuple[int, float, dict[str, Any]]]] = {"plain": [], "routed": []}
    with stack() as (nats_url, routed_url, plain_url):
        for number in range(args.rounds):
            order = [("plain", plain_url), ("routed", routed_url)]
            for mode, url in order if number % 2 == 0 else reversed(order):
                turns[mode] += asyncio.run(run_mode(url, f"{mode} {number}", args))
        plain = asyncio.run(summary(nats_url, turns["plain"]))
        routed = asyncio.run(summary(nats_url, turns["routed"]))
    row = {"chains": args.chains, "turns": args.turns, "rounds": args.rounds,
           "routed": routed, "plain": plain,
           "ttft_speedup": plain["ttft_p50_s"] / routed["ttft_p50_s"]}
    print(f"{args.chains} chains x {args.turns} turns, ~{args.history}-token histories, 2 workers; "
          f"turns 2+: hit rate {routed['hit_rate']:.0%} routed vs {plain['hit_rate']:.0%} "
          f"without; first token p50 {routed['ttft_p50_s']:.2f} s vs {plain['ttft_p50_s']:.2f} s "
          f"({row['ttft_speedup']:.2f}x sooner); per worker routed {routed['per_worker']}, "
          f"without {plain['per_worker']}")
    for mode, figures in (("routed", routed), ("without", plain)):
        print(f"first token p50 by turn, {mode}: " + ", ".join(
            f"turn {n} {s:.2f} s" for n, s in figures["ttft_p50_s_by_turn"].items()))
    return row


if __name__ == "__main__":
    main()
