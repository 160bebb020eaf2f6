"""The real model served end to end, as `make serve` runs it: `spate serve` (embedded NATS,
one worker, the API) on this machine, with N concurrent SSE clients each streaming
greedy tokens from `/v1/responses`. Prints delivered tokens per second in total, each
stream's decode rate, time to first token (p50, p99), and the CPU milliseconds each
process (API, worker, nats-server, the clients) spent per token.

Servers compared: spate once per `--weights` setting, at its defaults; with
`--threads N`, spate whose worker decodes on N threads too; with `--llama-server PATH`,
llama.cpp's `llama-server` serving the same GGUF file **as it comes**: its default
threads (every core), slots and context, nothing but the model, the address and
`--llama-args` (empty unless given), streamed by the same client on its own
`/v1/responses`. The servers alternate round by round, so a drift in the machine's speed
hits all alike.

    .venv/bin/python benchmarks/bench_serve.py [--streams 1 8 32] [--tokens 128] [--rounds 2]
        [--weights auto quantized bf16] [--threads N] [--llama-server PATH] [--llama-args=...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import free_port  # noqa: E402
from workers.model.host import usable_cpu_count  # noqa: E402
from workers.model.loader import served_model_path  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class Server:
    """One server under test: how to start it on a port, and where it says it is ready."""

    name: str
    command: Callable[[int], list[str]]
    ready_path: str


def spate_server(name: str, weights: str, num_threads: int | None) -> Server:
    def command(port: int) -> list[str]:
        line = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
        line += ["--weights", weights]
        if num_threads is not None:
            line += ["--num-threads", str(num_threads)]
        return line

    return Server(name, command, "/ready")


def llama_server(binary: str, gguf: Path, extra_args: list[str] | None = None) -> Server:
    """llama.cpp's server on the same file, at its defaults: a user's first run."""

    def command(port: int) -> list[str]:
        return [
            binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            *(extra_args or []),
        ]

    return Server("llama-server", command, "/health")


def start(server: Server, port: int) -> subprocess.Popen[bytes]:
    env = {
        key: value for key, value in os.environ.items()
        if key not in ("SPATE_NUM_THREADS", "SPATE_WEIGHTS")
    }
    process = subprocess.Popen(
        server.command(port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            reply = httpx.get(f"http://127.0.0.1:{port}{server.ready_path}", timeout=1)
            if reply.status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop(process)
    raise RuntimeError(f"{server.name} did not become ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stream_body(index: int, tokens: int) -> dict[str, object]:
    """Stream `index`'s request: `tokens` greedy tokens, never stopped early."""
    return {
        "model": MODEL,
        "input": f"Write a long essay ({index}) about the sea.",
        "max_output_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }


def one_stream(
    client: httpx.Client, port: int, index: int, tokens: int
) -> tuple[int, float, float]:
    """(tokens, seconds to the first delta, seconds from the first delta to the end). Tokens
    are the final Response's `usage.output_tokens` (a delta may carry several tokens: a
    speculative step's, or a server's coalesced ones), else the deltas counted. The final
    Response comes in whichever event ends the stream: `response.incomplete` where the
    stream stopped at `max_output_tokens`, as every stream here does. The client is made
    beforehand: making one (its TLS context) takes tens of milliseconds, which are not the
    server's."""
    body = stream_body(index, tokens)
    started = time.perf_counter()
    first = None
    deltas = 0
    used = None
    url = f"http://127.0.0.1:{port}/v1/responses"
    with client.stream("POST", url, json=body, timeout=600) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data:"):
                continue
            if '"response.output_text.delta"' in line:
                deltas += 1
                if first is None:
                    first = time.perf_counter()
            elif '"response.completed"' in line or '"response.incomplete"' in line:
                usage = json.loads(line[5:]).get("response", {}).get("usage") or {}
                used = usage.get("output_tokens")
    if first is None:
        raise RuntimeError(f"stream {index} delivered no text")
    return used or deltas, first - started, time.perf_counter() - first


def proc_stats() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds used so far (user + system), from one pass
    over /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # the fields after the command name: state, ppid, ... utime (12th), stime
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return stats


def role_of(pid: int) -> str:
    """Which part of a server `pid` is: spate's subcommand (serve, api, worker), else the
    program's name (nats-server, llama-server)."""
    try:
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    words = [word.decode(errors="replace") for word in argv if word]
    if len(words) > 3 and words[1:3] == ["-m", "cli.main"]:
        return words[3]
    return Path(words[0]).name if words else "?"


def cpu_seconds(root: int) -> dict[str, float]:
    """CPU seconds each part of the server under `root` (itself and every process below
    it) has used so far."""
    stats = proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    used: dict[str, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if pid in stats:
            role = role_of(pid)
            used[role] = used.get(role, 0.0) + stats[pid][1]
    return used


def client_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(
    port: int, streams: int, tokens: int, server_pid: int | None = None,
    cpu: dict[str, float] | None = None,
) -> tuple[float, float, float, float]:
    """(tokens/s in total, median per-stream decode rate, TTFT p50 and p99 in ms).

    With `server_pid` and `cpu`, adds to `cpu` the CPU milliseconds per token each part of
    the server (and this client) spent in the run."""
    before = cpu_seconds(server_pid) if server_pid is not None else {}
    client_before = client_cpu_seconds()
    clients = [httpx.Client() for _ in range(streams)]
    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(
            lambda index: one_stream(clients[index], port, index, tokens), range(streams)
        ))
    elapsed = time.perf_counter() - started
    for client in clients:
        client.close()
    delivered = sum(deltas for deltas, _, _ in results)
    if delivered != streams * tokens:  # ignore_eos: each stream makes exactly `tokens`
        raise RuntimeError(f"{streams} streams of {tokens} tokens delivered {delivered}")
    if server_pid is not None and cpu is not None:
        after = cpu_seconds(server_pid)
        after["client"] = client_cpu_seconds() - client_before
        for role, seconds in after.items():
            spent = seconds - before.get(role, 0.0)
            cpu[role] = cpu.get(role, 0.0) + 1000 * spent / delivered
    total = delivered / elapsed
    decode = statistics.median((deltas - 1) / span for deltas, _, span in results if span > 0)
    firsts = [first * 1000 for _, first, _ in results]
    return total, decode, percentile(firsts, 0.5), percentile(firsts, 0.99)


Results = dict[tuple[str, int], list[tuple[float, float, float, float]]]


def main(argv: list[str] | None = None) -> Results:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--weights", nargs="+", default=["auto"], choices=["auto", "quantized", "bf16"],
        help="one spate server per setting (`spate serve --weights`)",
    )
    parser.add_argument(
        "--threads", type=int, metavar="N",
        help="also spate with its worker decoding on N threads (`spate serve --num-threads`)",
    )
    parser.add_argument(
        "--llama-server", metavar="PATH",
        help="llama.cpp's llama-server binary: serve the same GGUF file as the peer",
    )
    parser.add_argument(
        "--llama-args", default="", metavar="ARGS",
        help="more arguments for llama-server, split at spaces (e.g. --llama-args=-nr where "
        "its AMX repacking crashes)",
    )
    args = parser.parse_args(argv)

    cores = usable_cpu_count()
    servers = [
        spate_server(f"spate, {weights} weights", weights, None)
        for weights in dict.fromkeys(args.weights)
    ]
    if args.threads:
        servers.append(
            spate_server(f"spate, {args.threads} decode threads", args.weights[0], args.threads)
        )
    if args.llama_server:
        servers.append(
            llama_server(args.llama_server, served_model_path(MODEL), args.llama_args.split())
        )
    results: Results = {}
    # CPU ms per token of each part of each server, summed over rounds.
    cpu: dict[tuple[str, int], dict[str, float]] = {}
    for _ in range(args.rounds):
        for server in servers:
            port = free_port()
            process = start(server, port)
            try:
                with httpx.Client() as client:
                    # Warm up with a stream of the measured length: what a first long
                    # stream meets once (its cache blocks' first touch, allocations of
                    # its sizes) lands in no measured run, for either server.
                    one_stream(client, port, 0, args.tokens)
                for streams in args.streams:
                    results.setdefault((server.name, streams), []).append(
                        measure(port, streams, args.tokens, process.pid,
                                cpu.setdefault((server.name, streams), {}))
                    )
            finally:
                stop(process)
    print(
        f"{MODEL}, {args.tokens} tokens per stream, {cores} cores, every server at its "
        f"defaults unless named otherwise, median of {args.rounds} rounds"
    )
    print("| server | streams | tokens/s total | per-stream decode/s | TTFT p50 | TTFT p99 |")
    print("|---|---|---|---|---|---|")
    for streams in args.streams:
        for server in servers:
            runs = results[(server.name, streams)]
            total, decode, ttft, ttft_p99 = (
                statistics.median(run[index] for run in runs) for index in range(4)
            )
            print(
                f"| {server.name} | {streams} | {total:.1f} | {decode:.1f} | {ttft:.0f} ms "
                f"| {ttft_p99:.0f} ms |"
            )
    print()
    print("CPU milliseconds per token, by process (the client is this script's streams):")
    roles = sorted({role for used in cpu.values() for role in used if used[role] > 0.005})
    print("| server | streams | " + " | ".join(roles) + " |")
    print("|---|---|" + "---|" * len(roles))
    for streams in args.streams:
        for server in servers:
            used = cpu[(server.name, streams)]
            print(f"| {server.name} | {streams} | " + " | ".join(
                f"{used.get(role, 0.0) / args.rounds:.2f}" for role in roles) + " |")
    if args.llama_server:
        print("| ratio to llama-server, tokens/s in total | " + " | ".join(
            f"{streams} streams" for streams in args.streams) + " |")
        for server in servers[:-1]:
            ratios = []
            for streams in args.streams:
                ours = statistics.median(run[0] for run in results[(server.name, streams)])
                theirs = statistics.median(run[0] for run in results[("llama-server", streams)])
                ratios.append(f"{ours / theirs:.2f}")
            print(f"| {server.name} | " + " | ".join(ratios) + " |")
    return results


if __name__ == "__main__":
    main()
