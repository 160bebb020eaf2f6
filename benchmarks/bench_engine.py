"""Steady-state decode throughput of the engine on the default model at 1, 8 and 32
concurrent sequences (after every prefill is done), and the process's resident memory.

    .venv/bin/python benchmarks/bench_engine.py [--dtype bfloat16] [--concurrency 1 8 32]
        [--llama-batched-bench PATH]

With `--llama-batched-bench`, llama.cpp's batched benchmark runs right after on the same
GGUF file, threads and concurrencies, and the figures are printed side by side: the
baseline measured in the same run on the same machine.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from workers.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from workers.model import DEFAULT_MODEL, load_model, serving_dtype  # noqa: E402
from workers.model.loader import SERVED_MODELS, served_model_path  # noqa: E402

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
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_output_tokens=max_tokens)
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


def llama_cpp_decode_rates(
    binary: str, gguf: Path, concurrency: list[int], prompt_tokens: int, threads: int
) -> dict[int, float]:
    """llama.cpp's text-generation tokens per second in total at each concurrency, from
    `llama-batched-bench` (each sequence its own prompt, 128 generated tokens)."""
    command = [
        binary,
        "-m",
        str(gguf),
        "-c",
        str(max(concurrency) * (prompt_tokens + 160)),
        "-npp",
        str(prompt_tokens),
        "-ntg",
        "128",
        "-npl",
        ",".join(str(count) for count in concurrency),
        "-t",
        str(threads),
        "-tb",
        str(threads),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    rates = parse_batched_bench(result.stdout)
    missing = [count for count in concurrency if count not in rates]
    if missing:
        raise RuntimeError(f"llama-batched-bench printed no row for {missing}:\n{result.stdout}")
    return rates


def parse_batched_bench(stdout: str) -> dict[int, float]:
    """Sequences in parallel -> text-generation tokens/s in total, from the table
    | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |."""
    rates = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and all(re.fullmatch(r"[0-9.]+", cell) for cell in cells[:8]):
            rates[int(cells[2])] = float(cells[7])
    return rates


def main(argv: list[str] | None = None) -> dict[int, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--dtype",
        choices=["auto", *sorted(DTYPES)],
        default="auto",
        help="default: what a worker serves in on this machine",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=32, help="decode steps per window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--num-kv-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="default: every usable core")
    parser.add_argument(
        "--llama-batched-bench",
        metavar="PATH",
        help="llama.cpp's llama-batched-bench binary: run it as the baseline (GGUF models only)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help="after the windows, print the ROWS ops taking the most time in one more window",
    )
    args = parser.parse_args(argv)

    dtype = serving_dtype("cpu") if args.dtype == "auto" else DTYPES[args.dtype]
    loaded = load_model(args.model, dtype=dtype)
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
        f"model {loaded.name} ({str(dtype).removeprefix('torch.')}), {torch.get_num_threads()} threads, "
        f"{engine.model_runner.num_kv_blocks} KV blocks; RSS after load {rss:.0f} MiB"
    )
    measured = {}
    prompt_lengths = []
    for concurrency in args.concurrency:
        prompt_ids = prompts(loaded, concurrency)
        prompt_lengths.extend(len(ids) for ids in prompt_ids)
        rates = sorted(
            decode_throughput(
                engine,
                prompt_ids,
                args.warmup_steps,
                args.steps,
                args.windows,
                args.profile,
            )
        )
        median, best = rates[len(rates) // 2], rates[-1]
        measured[concurrency] = median
        rss, _ = resident_memory_mib()
        print(
            f"concurrency {concurrency:3d}: {median:8.1f} tokens/s total (median window, "
            f"best {best:.1f}), {median / concurrency:6.1f} per sequence; RSS {rss:.0f} MiB"
        )
    _, peak = resident_memory_mib()
    print(f"peak RSS {peak:.0f} MiB")
    if args.llama_batched_bench:
        gguf = served_model_path(args.model) if args.model in SERVED_MODELS else Path(args.model)
        baseline = llama_cpp_decode_rates(
            args.llama_batched_bench,
            gguf,
            args.concurrency,
            round(sum(prompt_lengths) / len(prompt_lengths)),
            torch.get_num_threads(),
        )
        print(f"llama.cpp on {gguf.name}, {torch.get_num_threads()} threads:")
        for concurrency in args.concurrency:
            print(
                f"concurrency {concurrency:3d}: {baseline[concurrency]:8.1f} tokens/s total; "
                f"spate / llama.cpp = {measured[concurrency] / baseline[concurrency]:.2f}"
            )
    return measured


if __name__ == "__main__":
    main()
