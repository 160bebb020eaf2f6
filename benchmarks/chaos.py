"""Chaos run: `kill -9` the worker holding a streaming greedy response at a random token.

Real processes, as a deployment runs them: an embedded nats-server, the API and two
workers serving the default model. Each trial streams one greedy response, kills the
worker that holds it after a random number of text deltas, starts a fresh worker in its
place (so two stay up), and checks that the stream ends complete, with contiguous
sequence numbers and exactly the text of an uninterrupted run. The stall is the time from
the kill to the next text delta (it includes JetStream's redelivery after the ack wait).

    .venv/bin/python benchmarks/chaos.py [--trials 20] [--tokens 40] [--ack-wait 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
SERVED_NAME = "chaos-smollm"
PROMPT = "Write a long story about a lighthouse keeper and the sea."
MODEL_LOAD_TIMEOUT = 600


@dataclass
class Cluster:
    """nats-server, the API and the workers of one run; workers are replaced as they die."""

    nats: EmbeddedNats
    base_url: str
    api: SpateProcess
    ack_wait_s: float
    workers: dict[str, SpateProcess] = field(default_factory=dict)
    dead: list[SpateProcess] = field(default_factory=list)
    started: int = 0

    def start_worker(self) -> SpateProcess:
        self.started += 1
        worker_id = f"chaos-worker-{self.started}"
        env = {"SPATE_NATS_URL": self.nats.url, "SPATE_WORKER_ID": worker_id,
               "SPATE_ACK_WAIT_S": str(self.ack_wait_s)}
        args = ["worker", "--model", MODEL, "--served-model-name", SERVED_NAME,
                "--max-num-seqs", "4"]
        self.workers[worker_id] = SpateProcess(args, env, worker_id)
        return self.workers[worker_id]

    def ready(self) -> int:
        """Workers up and serving (each logs it once it has advertised its model)."""
        for worker in self.workers.values():
            if not worker.alive():
                raise RuntimeError(f"{worker.name} exited:\n{worker.output()[-4000:]}")
        return sum("ready: serving" in worker.output() for worker in self.workers.values())

    def wait_ready(self, count: int) -> None:
        if not wait_for(lambda: self.ready() >= count, MODEL_LOAD_TIMEOUT, 0.5):
            raise RuntimeError(f"fewer than {count} workers ready after {MODEL_LOAD_TIMEOUT}s")

    def kill(self, worker_id: str) -> None:
        worker = self.workers.pop(worker_id)
        worker.kill()
        self.dead.append(worker)

    def takeovers(self, response_id: str) -> int:
        """How many times a worker resumed the response (one per kill; more means a live
        worker missed its heartbeat and lost the request: an ack wait too short)."""
        logs = [worker.output() for worker in [*self.workers.values(), *self.dead]]
        return sum(log.count(f"resuming {response_id} ") for log in logs)


@contextmanager
def cluster(ack_wait_s: float, num_workers: int) -> Iterator[Cluster]:
    with EmbeddedNats() as nats:
        port = free_port()
        env = {"SPATE_NATS_URL": nats.url, "SPATE_ACK_WAIT_S": str(ack_wait_s)}
        api = SpateProcess(["api", "--port", str(port)], env, "chaos-api")
        running = Cluster(nats, f"http://127.0.0.1:{port}", api, ack_wait_s)
        try:
            wait_http(f"{running.base_url}/health", api, timeout=60)
            for _ in range(num_workers):
                running.start_worker()
            running.wait_ready(num_workers)
            yield running
        finally:
            for worker in running.workers.values():
                worker.stop()
            api.stop()


def holder_of(nats_url: str, response_id: str) -> str:
    """The worker that started the response, from its generation.started event."""

    async def read() -> str:
        journal = Journal(JournalSettings(nats_url=nats_url), "chaos")
        journal.start()
        try:
            await journal.wait_connected()
            for event in await journal.read_log(response_id):
                if isinstance(event, GenerationStarted):
                    return event.worker_id
            raise RuntimeError(f"{response_id} has no generation.started event")
        finally:
            await journal.close()

    return asyncio.run(read())


def request_body(tokens: int, stream: bool, ignore_eos: bool = False) -> dict[str, object]:
    return {"model": SERVED_NAME, "input": PROMPT, "temperature": 0, "max_output_tokens": tokens,
            "stream": stream, "ignore_eos": ignore_eos}


@dataclass
class Streamed:
    events: list[dict[str, Any]] = field(default_factory=list)
    delta_times: list[float] = field(default_factory=list)  # perf_counter at each text delta

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "response.output_text.delta")


def stream(
    running: Cluster, tokens: int, kill_after: int | None = None, ignore_eos: bool = False
) -> tuple[Streamed, float | None]:
    """One streamed response; with `kill_after`, its worker is killed (and a fresh one
    started) once that many text deltas have arrived. Returns the stream and the kill time."""
    streamed, killed_at, holder = Streamed(), None, ""
    with httpx.stream("POST", f"{running.base_url}/v1/responses",
                      json=request_body(tokens, True, ignore_eos), timeout=600) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[5:])
            streamed.events.append(event)
            if event["type"] != "response.output_text.delta":
                continue
            streamed.delta_times.append(time.perf_counter())
            if kill_after is not None and not holder:
                # Looked up at the first delta, so the kill itself is one signal away.
                holder = holder_of(running.nats.url, streamed.events[0]["response"]["id"])
            if len(streamed.delta_times) == kill_after:
                running.kill(holder)
                killed_at = time.perf_counter()
                running.start_worker()
    return streamed, killed_at


def stall_after(streamed: Streamed, killed_at: float) -> float:
    """From the kill to the first delta the replacement produced. Deltas the dead worker
    published just before it died may still arrive after the kill, so the replacement's
    first delta is taken as the one after the longest gap."""
    later = [moment for moment in streamed.delta_times if moment > killed_at]
    if not later:
        return float("nan")
    gaps = [later[0] - killed_at] + [b - a for a, b in zip(later, later[1:], strict=False)]
    return later[gaps.index(max(gaps))] - killed_at


@dataclass
class Trial:
    kill_after: int
    identical: bool
    complete: bool
    contiguous: bool
    stall_s: float
    takeovers: int
    note: str = ""


def run_trial(running: Cluster, tokens: int, kill_after: int, expected: str) -> Trial:
    streamed, killed_at = stream(running, tokens, kill_after)
    events = streamed.events
    last = events[-1] if events else {}
    complete = last.get("type") in ("response.completed", "response.incomplete")
    final_text = ""
    if complete and last["response"]["output"]:
        final_text = last["response"]["output"][0]["content"][0]["text"]
    contiguous = [e["sequence_number"] for e in events] == list(range(len(events)))
    identical = streamed.text == expected and final_text == expected
    note = "" if complete else f"ended with {json.dumps(last)[:300]}"
    if complete and not identical:
        note = f"text differs: {streamed.text!r}"
    stall = stall_after(streamed, killed_at) if killed_at is not None else float("nan")
    takeovers = running.takeovers(events[0]["response"]["id"]) if events else 0
    return Trial(kill_after, identical, complete, contiguous, stall, takeovers, note)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def summarize(trials: list[Trial]) -> dict[str, float]:
    # A kill that lands after the worker's last token leaves nothing to take over; such a
    # trial still counts for the text and sequence checks, but has no stall to measure.
    stalls = [trial.stall_s for trial in trials
              if trial.takeovers and trial.stall_s == trial.stall_s]
    return {
        "trials": len(trials),
        "identical": sum(trial.identical for trial in trials),
        "complete": sum(trial.complete for trial in trials),
        "contiguous": sum(trial.contiguous for trial in trials),
        "single_takeover": sum(trial.takeovers == 1 for trial in trials),
        "finished_before_kill": sum(trial.takeovers == 0 for trial in trials),
        "stall_median_s": statistics.median(stalls) if stalls else float("nan"),
        "stall_p99_s": percentile(stalls, 0.99) if stalls else float("nan"),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=40, help="max_output_tokens per response")
    parser.add_argument("--ack-wait", type=float, default=5.0,
                        help="SPATE_ACK_WAIT_S: how long before a dead worker's request is redelivered")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random kill points")
    parser.add_argument("--workers", type=int, default=2,
                        help="workers started; a trial waits until two are ready, and a killed "
                             "worker's replacement loads meanwhile")
    args = parser.parse_args(argv)
    pick = random.Random(args.seed)
    trials: list[Trial] = []
    if args.workers < 2:
        parser.error("--workers must be at least 2: the kill needs a survivor to take over")
    with cluster(args.ack_wait, args.workers) as running:
        reference, _ = stream(running, args.tokens)
        expected, num_deltas = reference.text, len(reference.delta_times)
        if num_deltas < 2:
            raise RuntimeError(f"the uninterrupted run streamed {num_deltas} text deltas")
        reference_takeovers = running.takeovers(reference.events[0]["response"]["id"])
        if reference_takeovers:
            raise RuntimeError("the uninterrupted run was taken over by another worker: "
                               "raise --ack-wait for this machine's load")
        print(f"uninterrupted run: {num_deltas} text deltas: {expected!r}", flush=True)
        for number in range(args.trials):
            running.wait_ready(2)
            # At least one delta before the kill and one after it.
            kill_after = pick.randint(1, num_deltas - 1)
            trial = run_trial(running, args.tokens, kill_after, expected)
            trials.append(trial)
            print(f"trial {number + 1}: killed after {kill_after} deltas, "
                  f"identical={trial.identical} complete={trial.complete} "
                  f"contiguous={trial.contiguous} takeovers={trial.takeovers} "
                  f"stall={trial.stall_s:.2f}s {trial.note}",
                  flush=True)
    summary = summarize(trials)
    print(f"{summary['identical']}/{summary['trials']} identical to the uninterrupted run, "
          f"{summary['complete']} complete, {summary['contiguous']} with contiguous sequence "
          f"numbers, {summary['single_takeover']} taken over exactly once "
          f"({summary['finished_before_kill']} finished before the kill); stall from kill to next token: median {summary['stall_median_s']:.2f}s, "
          f"p99 {summary['stall_p99_s']:.2f}s (ack wait {args.ack_wait}s)", flush=True)
    return summary


if __name__ == "__main__":
    # A SIGTERM still stops the processes the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
