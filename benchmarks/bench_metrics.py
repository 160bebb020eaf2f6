"""What the metrics cost on the hot path, next to what the same path already spends.

Per token event the API's fold loop adds one type check and one `ResponseTimer.tokens`
call (two adds, with the clock reading the loop already took); per response, three histogram samples. The comparison is decoding the same
tokens.generated event, which the API does for every event anyway.

    .venv/bin/python benchmarks/bench_metrics.py [--events 200000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api.metrics import ApiMetrics, ResponseTimer  # noqa: E402
from events import TokensGenerated, decode, encode  # noqa: E402


def best_of(runs: int, count: int, work: object) -> float:
    """Seconds per call of `work()`, the best of `runs` runs (the least disturbed)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(count):
            work()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - start) / count)
    return best


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    metrics = ApiMetrics()
    timer = ResponseTimer(metrics, time.monotonic)
    event = encode(TokensGenerated(response_id="resp_bench", seq=5, channel="text", text="hello",
                                   token_ids=(42,)))

    def one_response() -> None:
        response = ResponseTimer(metrics, time.monotonic)
        response.tokens(1, 1.0)
        response.tokens(1, 2.0)
        response.finish()

    figures = {
        "timer_per_token_event_ns": best_of(args.runs, args.events, lambda: timer.tokens(1, 1.0)) * 1e9,
        "decode_per_token_event_ns": best_of(args.runs, args.events, lambda: decode(event)) * 1e9,
        "timer_per_response_us": best_of(args.runs, max(1, args.events // 10), one_response) * 1e6,
    }
    print(f"per token event: metrics {figures['timer_per_token_event_ns']:.0f} ns, "
          f"decoding it {figures['decode_per_token_event_ns']:.0f} ns "
          f"({figures['timer_per_token_event_ns'] / figures['decode_per_token_event_ns']:.1%}); "
          f"per response (3 histogram samples): {figures['timer_per_response_us']:.1f} us")
    return figures


if __name__ == "__main__":
    main()
