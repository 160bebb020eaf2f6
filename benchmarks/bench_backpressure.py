"""Many concurrent SSE streams against one API process: its memory, and every event
checked against the log.

The worker runs the SYNTHETIC token source (benchmarks/synthetic_engine.py), so the load
is the serving path alone. A share of the clients read slowly (a pause after every
event), so the API holds events for readers that lag. The API's resident memory is
sampled from /proc while the streams run. When they are done, each response's log is read
back from NATS and folded (events/fold.py, as the API folds it); the SSE events a client
received must equal that fold, event for event: any missing, repeated or changed event
counts as lost.

    .venv/bin/python benchmarks/bench_backpressure.py [--streams 1000] [--tokens 64]
        [--slow-share 0.1] [--slow-pause 0.02] [--ramp 5] [--timeout 900]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_stream import wait_ready  # noqa: E402
from benchmarks.synthetic_engine import SYNTHETIC_MODEL  # noqa: E402
from cli.nats_server import EmbeddedNats, free_port  # noqa: E402
from events import ResponseFold  # noqa: E402
from journal import Journal, JournalSettings  # noqa: E402


@dataclass
class Stream:
    response_id: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    # The HTTP status; a refused stream (429, 503) keeps its error body here.
    status: int = 0
    refusal: str = ""


def rss_kib(pid: int, key: str = "VmRSS") -> int:
    """A process's resident set (or its peak, VmHWM) in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kib = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))
            time.sleep(self.interval_s)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak_kib


@dataclass
class OpenStreams:
    now: int = 0
    peak: int = 0


async def one_stream(client: httpx.AsyncClient, url: str, tokens: int, pause_s: float,
                     start_after_s: float, open_streams: OpenStreams) -> Stream:
    body = {"model": SYNTHETIC_MODEL, "input": "backpressure benchmark", "stream": True,
            "max_output_tokens": tokens}
    stream = Stream()
    await asyncio.sleep(start_after_s)
    async with client.stream("POST", url, json=body) as reply:
        stream.status = reply.status_code
        if reply.status_code != 200:
            await reply.aread()
            stream.refusal = reply.text
            return stream
        open_streams.now += 1
        open_streams.peak = max(open_streams.peak, open_streams.now)
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[5:])
            stream.events.append(event)
            if not stream.response_id and "response" in event:
                stream.response_id = event["response"]["id"]
            if pause_s:
                await asyncio.sleep(pause_s)
        open_streams.now -= 1
    return stream


async def run_streams(url: str, streams: int, tokens: int, slow_share: float,
                      slow_pause_s: float, ramp_s: float, timeout: float,
                      open_streams: OpenStreams | None = None) -> list[Stream]:
    """`streams` streams, opened evenly over `ramp_s` seconds (a burst of a thousand
    requests in the same instant is a NATS publish storm, not a test of open streams)."""
    slow_every = round(1 / slow_share) if slow_share > 0 else 0
    open_streams = open_streams or OpenStreams()
    # A connection per stream: reusing one the server is closing for being idle (uvicorn
    # keeps them 5 s) would fail the stream on the client's side, not the server's.
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        return await asyncio.gather(*(
            one_stream(client, url, tokens,
                       slow_pause_s if slow_every and index % slow_every == 0 else 0.0,
                       ramp_s * index / streams, open_streams)
            for index in range(streams)
        ))


def lost_in(received: list[dict[str, Any]], expected: list[dict[str, Any]]) -> int:
    """Events of `expected` a client did not get exactly (missing or changed), plus the
    ones it got that are not there or came twice or out of order."""
    by_number: dict[int, dict[str, Any]] = {}
    wrong = 0
    for event in received:
        number = event.get("sequence_number")
        if not isinstance(number, int) or number in by_number:
            wrong += 1  # repeated
            continue
        if by_number and number < max(by_number):
            continue  # out of order: counted as missing from its place
        by_number[number] = event
    missing = sum(1 for want in expected if by_number.get(want["sequence_number"]) != want)
    unknown = len(set(by_number) - {want["sequence_number"] for want in expected})
    return missing + unknown + wrong


async def lost_events(nats_url: str, streams: list[Stream]) -> tuple[int, int]:
    """(events the log's fold has that the clients did not get exactly, events checked)."""
    journal = Journal(JournalSettings(nats_url=nats_url), name="bench-backpressure")
    journal.start()
    if not await journal.wait_connected():
        raise RuntimeError("could not connect to NATS to read the logs")
    gate = asyncio.Semaphore(16)

    async def check(stream: Stream) -> tuple[int, int]:
        if not stream.response_id:  # not even response.created came
            return max(1, len(stream.events)), 0
        async with gate:
            log = await journal.read_log(stream.response_id)
        fold = ResponseFold()
        expected = [sse for event in log for sse in fold.apply(event)]
        return lost_in(stream.events, expected), len(expected)

    try:
        results = await asyncio.gather(*(check(stream) for stream in streams
                                         if stream.status == 200))
    finally:
        await journal.close()
    return sum(lost for lost, _ in results), sum(checked for _, checked in results)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000, help="concurrent SSE streams")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    parser.add_argument("--slow-share", type=float, default=0.1,
                        help="share of clients that pause after every event")
    parser.add_argument("--slow-pause", type=float, default=0.02,
                        help="seconds a slow client pauses after each event")
    parser.add_argument("--step-interval", type=float, default=0.01,
                        help="seconds per synthetic decode step")
    parser.add_argument("--ramp", type=float, default=5.0,
                        help="seconds over which the streams are opened")
    parser.add_argument("--nats-timeout", type=float, default=10.0,
                        help="the API's SPATE_NATS_TIMEOUT_S: the registry reads and request "
                             "publishes of a burst wait on one busy NATS")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a stream may take before the run fails")
    args = parser.parse_args(argv)

    port = free_port()
    env = {**os.environ, "SPATE_BENCH_STEP_INTERVAL_S": str(args.step_interval),
           "SPATE_BENCH_MAX_NUM_SEQS": str(max(args.streams, 1)),
           "SPATE_MAX_INFLIGHT": str(args.streams + 16),
           "SPATE_KEY_MAX_OPEN": str(args.streams + 16), "SPATE_LOG_LEVEL": "WARNING",
           "SPATE_NATS_TIMEOUT_S": str(args.nats_timeout)}
    with EmbeddedNats() as nats:
        env["SPATE_NATS_URL"] = nats.url
        worker = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/synthetic_worker.py")],
                                  env=env)
        api = subprocess.Popen([sys.executable, "-m", "cli.main", "api", "--port", str(port)],
                               cwd=ROOT, env=env)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(f"{base}/ready", timeout=120)
            url = f"{base}/v1/responses"
            asyncio.run(run_streams(url, 2, 4, 0, 0, 0, args.timeout))  # warm the path
            idle_kib = rss_kib(api.pid)
            sampler = RssSampler(api.pid)
            sampler.start()
            started = time.perf_counter()
            open_streams = OpenStreams()
            streams = asyncio.run(run_streams(url, args.streams, args.tokens, args.slow_share,
                                              args.slow_pause, args.ramp, args.timeout,
                                              open_streams))
            wall_s = time.perf_counter() - started
            peak_kib = sampler.stop()
            after_kib = rss_kib(api.pid)
            lost, checked = asyncio.run(lost_events(nats.url, streams))
        finally:
            for process in (api, worker):
                process.terminate()
            for process in (api, worker):
                process.wait(timeout=30)
    deltas = sum(event["type"] == "response.output_text.delta"
                 for stream in streams for event in stream.events)
    refused = [stream for stream in streams if stream.status != 200]
    ended = Counter(stream.events[-1]["type"] if stream.events else "nothing"
                    for stream in streams if stream.status == 200)
    result = {
        "streams": args.streams, "tokens": args.tokens, "wall_s": wall_s,
        "peak_open_streams": open_streams.peak,
        "api_rss_idle_mib": idle_kib / 1024, "api_rss_peak_mib": peak_kib / 1024,
        "api_rss_after_mib": after_kib / 1024,
        "peak_kib_per_stream": (peak_kib - idle_kib) / max(args.streams, 1),
        "events_checked": checked, "events_lost": lost, "deltas": deltas,
        "refused": len(refused), "completed": ended["response.completed"]
        + ended["response.incomplete"],
    }
    print(f"{args.streams} streams x {args.tokens} tokens ({args.slow_share:.0%} reading with "
          f"a {args.slow_pause * 1000:.0f} ms pause per event), opened over {args.ramp:g} s, "
          f"in {wall_s:.1f} s; at most {open_streams.peak} open at once")
    print(f"API RSS: idle {result['api_rss_idle_mib']:.1f} MiB, peak "
          f"{result['api_rss_peak_mib']:.1f} MiB ({result['peak_kib_per_stream']:.1f} KiB per "
          f"stream), after {result['api_rss_after_mib']:.1f} MiB")
    print(f"events checked against the log: {checked}, lost: {lost}; "
          f"text deltas delivered: {deltas}")
    print(f"streams ended by: {dict(ended)}; refused: {len(refused)} "
          f"{dict(Counter(stream.status for stream in refused))}")
    for stream in refused[:3]:
        print(f"  refused {stream.status}: {stream.refusal[:200]}")
    return result


if __name__ == "__main__":
    main()
