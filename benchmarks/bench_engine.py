"""Steady-state decode throughput of the engine on the default model at 1, 8 and 32
concurrent sequences (after every prefill is done), and the process's resident memory.

    .venv/bin/python benchmarks/bench_engine.py [--dtype bfloat16] [--concurrency 1 8 32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workers.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from workers.model import DEFAULT_MODEL, load_model  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOPICS = (
    "the history of Rome",
    "how bees make honey",
    "the water cycle",
    "black holes",
    "the French revolution",
    "photosynthesis",
    "how a compiler works",
    "ocean tides",
)


def resident_memory_mib() -> tuple[float, float]:
    """Current and peak resident set size in MiB, from /proc/self/status."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def prompts(loaded, count: int) -> list[list[int]]:
    result = []
    for index in range(count):
        topic = TOPICS[index % len(TOPICS)]
        text = loaded.chat_template.render(
            [{"role": "user", "content": f"Write a long essay ({index}) about {topic}."}]
        )
        result.append(loaded.tokenizer.encode(text))
    return result


def decode_throughput(
    engine: LLMEngine,
    prompt_ids: list[list[int]],
    warmup_steps: int,
    steps: int,
    windows: int,
    profile_rows: int = 0,
) -> list[float]:
    """Tokens per second in each of `windows` runs of `steps` decode steps, measured once
    every sequence has its first token. Several windows, because on a shared machine one
    window can land on someone else's busy moment."""
    max_tokens = warmup_steps + (windows + (1 if profile_rows else 0)) * steps + 2
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=max_tokens)
    for index, token_ids in enumerate(prompt_ids):
        engine.add_request(f"bench-{len(prompt_ids)}-{index}", token_ids, params)
    # Prefill steps first (the scheduler prefers them), then a few decode steps to warm up.
    while engine.scheduler.waiting:
        engine.step()
    for _ in range(warmup_steps):
        engine.step()
    rates = []
    for _ in range(windows):
        started = time.perf_counter()
        generated = 0
        for _ in range(steps):
            generated += len(engine.step())
        rates.append(generated / (time.perf_counter() - started))
    if profile_rows:
        print_profile(engine, steps, profile_rows)
    while engine.has_unfinished_requests():
        engine.step()
    return rates


def print_profile(engine: LLMEngine, steps: int, rows: int) -> None:
    """Where one more window of decode steps spends its time, op by op (self time)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            engine.step()
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    print(f"profile of {steps} decode steps:\n{table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=32, help="decode steps per window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--num-kv-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="default: every usable core")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="ROWS",
        help="after the windows, print the ROWS ops taking the most time in one more window",
    )
    args = parser.parse_args()

    loaded = load_model(args.model, dtype=DTYPES[args.dtype])
    engine = LLMEngine(
        loaded,
        EngineConfig(
            num_kv_blocks=args.num_kv_blocks,
            max_num_seqs=max(args.concurrency),
            num_threads=args.threads,
        ),
    )
    rss, _ = resident_memory_mib()
    print(
        f"model {loaded.name} ({args.dtype}), {torch.get_num_threads()} threads, "
        f"{engine.model_runner.num_kv_blocks} KV blocks; RSS after load {rss:.0f} MiB"
    )
    for concurrency in args.concurrency:
        rates = sorted(
            decode_throughput(
                engine,
                prompts(loaded, concurrency),
                args.warmup_steps,
                args.steps,
                args.windows,
                args.profile,
            )
        )
        median, best = rates[len(rates) // 2], rates[-1]
        rss, _ = resident_memory_mib()
        print(
            f"concurrency {concurrency:3d}: {median:8.1f} tokens/s total (median window, "
            f"best {best:.1f}), {median / concurrency:6.1f} per sequence; RSS {rss:.0f} MiB"
        )
    _, peak = resident_memory_mib()
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
