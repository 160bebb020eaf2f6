"""What resuming a response after its worker dies costs: the stall from `kill -9` of the
worker holding a streaming greedy response to the next text delta, after N emitted tokens.

Real processes (benchmarks/chaos.py's cluster: nats-server, the API, two workers with the
default model). The stall is the redelivery wait (JetStream redelivers after the ack
wait, `--ack-wait`) plus the replacement's work: reading the response's log, then one
prefill of prompt and emitted tokens that rebuilds the KV cache with the dead worker's
bits, then the next token. Prints, per N, the tokens the replacement resumed with (from
its log), the stall, and the stall less the ack wait.

    .venv/bin/python benchmarks/bench_resume.py [--emitted 10 1000] [--ack-wait 5]
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.chaos import cluster, stall_after, stream  # noqa: E402

RESUMED = re.compile(r"resuming (\S+) \(delivery \d+\) at seq \d+ with (\d+) tokens")


def resumed_with(running, response_id: str) -> int | None:  # type: ignore[no-untyped-def]
    """How many emitted tokens the replacement continued from, as its log says."""
    for worker in running.workers.values():
        for found in RESUMED.finditer(worker.output()):
            if found.group(1) == response_id:
                return int(found.group(2))
    return None


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emitted", type=int, nargs="+", default=[10, 1000],
                        help="text deltas streamed before the kill")
    parser.add_argument("--after", type=int, default=64,
                        help="tokens the response still has to go after the kill: enough that "
                             "the worker cannot finish them between the delta and the kill")
    parser.add_argument("--ack-wait", type=float, default=5.0, help="SPATE_ACK_WAIT_S")
    args = parser.parse_args(argv)
    rows = []
    with cluster(args.ack_wait, 2) as running:
        for emitted in args.emitted:
            running.wait_ready(2)
            # Deltas can carry several tokens, so the limit leaves room past the kill point.
            tokens = emitted + emitted // 4 + args.after
            streamed, killed_at = stream(running, tokens, kill_after=emitted, ignore_eos=True)
            if killed_at is None:
                raise RuntimeError(f"the response ended before {emitted} text deltas")
            response_id = streamed.events[0]["response"]["id"]
            resumed = resumed_with(running, response_id)
            if resumed is None:
                raise RuntimeError(
                    f"no worker resumed {response_id}: it finished before the kill took "
                    f"effect; give it more tokens after the kill (--after {args.after})")
            stall = stall_after(streamed, killed_at)
            row = {"emitted_deltas": emitted, "resumed_tokens": resumed,
                   "stall_s": stall, "stall_less_ack_wait_s": stall - args.ack_wait}
            rows.append(row)
            print(f"killed after {emitted} deltas: replacement resumed with "
                  f"{row['resumed_tokens']} tokens; stall {stall:.2f}s "
                  f"({row['stall_less_ack_wait_s']:.2f}s past the {args.ack_wait}s ack wait)",
                  flush=True)
    return rows


if __name__ == "__main__":
    # A SIGTERM still stops the processes the run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
