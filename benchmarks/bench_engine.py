"""Steady-state decode throughput of the engine on the default model at 1, 8 and 32
concurrent sequences (after every prefill is done), and the process's resident memory.

    .venv/bin/python benchmarks/bench_engine.py [--dtype bfloat16] [--concurrency 1 8 32]
        [--weights quantized bf16] [--rounds 3] [--llama-batched-bench PATH]

Each round measures every `--weights` format in turn and then, with
`--llama-batched-bench`, llama.cpp's batched benchmark on the same GGUF file, threads and
concurrencies: the baseline measured in the same run on the same machine, alternated
round by round, and the medians are printed side by side.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.model.host import shorten_openmp_spin  # noqa: E402

shorten_openmp_spin()  # before torch loads, as a worker does

import torch  # noqa: E402

from workers.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from workers.model import (  # noqa: E402
    DEFAULT_MODEL,
    load_model,
    serving_dtype,
    serving_matmul_dtype,
)
from workers.model.loader import (  # noqa: E402
    SERVED_MODELS,
    WEIGHT_FORMATS,
    served_model_path,
)

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


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's parameters and buffers hold (what its weights cost resident)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(tensor.nbytes for tensor in tensors)


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
    params = SamplingParams.of(temperature=0.0, ignore_eos=True, max_output_tokens=max_tokens)
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
            # Tokens, not outputs: a speculative step may keep several a sequence.
            generated += sum(len(output.new_token_ids) for output in engine.step())
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
    binary: str, gguf: Path, concurrency: list[int], prompt_tokens: int, threads: int,
    extra_args: list[str] | None = None,
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
        *(extra_args or []),
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


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> dict[str, dict[int, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--dtype",
        choices=["auto", *sorted(DTYPES)],
        default="auto",
        help="default: what a worker serves in on this machine",
    )
    parser.add_argument(
        "--weights",
        nargs="+",
        choices=WEIGHT_FORMATS,
        default=["auto"],
        help="what the linears compute with; several are measured round by round",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=32, help="decode steps per window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="each round measures every weight format and the baseline once, in turn",
    )
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--num-kv-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="default: every usable core")
    parser.add_argument(
        "--llama-batched-bench",
        metavar="PATH",
        help="llama.cpp's llama-batched-bench binary: run it as the baseline (GGUF models only)",
    )
    parser.add_argument(
        "--llama-args",
        default="",
        metavar="ARGS",
        help="more arguments for llama.cpp, split at spaces (e.g. --llama-args=-nr where its "
        "AMX repacking crashes)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help="after the windows, print the ROWS ops taking the most time in one more window",
    )
    args = parser.parse_args(argv)

    if args.dtype == "auto":
        dtype = serving_dtype("cpu")
        matmul_dtype = serving_matmul_dtype("cpu", dtype)
    else:
        dtype = matmul_dtype = DTYPES[args.dtype]
    engines: dict[str, LLMEngine] = {}
    loaded = None
    for weights in dict.fromkeys(args.weights):
        before, _ = resident_memory_mib()
        loaded = load_model(args.model, dtype=dtype, weights=weights, matmul_dtype=matmul_dtype)
        after, _ = resident_memory_mib()
        label = weights if weights != "auto" else f"auto ({loaded.weights})"
        precision = str(dtype).removeprefix("torch.")
        if matmul_dtype != dtype and loaded.weights != "quantized":
            precision += f", linears in {str(matmul_dtype).removeprefix('torch.')}"
        engines[label] = LLMEngine(
            loaded,
            EngineConfig(
                num_kv_blocks=args.num_kv_blocks,
                max_num_seqs=max(args.concurrency),
                num_threads=args.threads,
            ),
        )
        print(
            f"model {loaded.name} ({precision}, weights {label}), "
            f"{torch.get_num_threads()} threads, {engines[label].model_runner.num_kv_blocks} KV "
            f"blocks; weights and buffers {model_bytes(loaded.model) / 2**20:.0f} MiB, "
            f"loading it grew RSS by {after - before:.0f} MiB"
        )
    assert loaded is not None
    prompt_ids = {count: prompts(loaded, count) for count in args.concurrency}
    lengths = [len(ids) for count in args.concurrency for ids in prompt_ids[count]]
    gguf = served_model_path(args.model) if args.model in SERVED_MODELS else Path(args.model)
    measured: dict[str, dict[int, list[float]]] = {}
    for round_index in range(args.rounds):
        for label, engine in engines.items():
            for concurrency in args.concurrency:
                rates = decode_throughput(
                    engine,
                    prompt_ids[concurrency],
                    args.warmup_steps,
                    args.steps,
                    args.windows,
                    args.profile,
                )
                measured.setdefault(label, {}).setdefault(concurrency, []).append(median(rates))
                print(
                    f"round {round_index + 1} {label:>16} concurrency {concurrency:3d}: "
                    f"{median(rates):8.1f} tokens/s total (median window, best {max(rates):.1f})"
                )
        if args.llama_batched_bench:
            baseline = llama_cpp_decode_rates(
                args.llama_batched_bench,
                gguf,
                args.concurrency,
                round(sum(lengths) / len(lengths)),
                torch.get_num_threads(),
                args.llama_args.split(),
            )
            for concurrency in args.concurrency:
                measured.setdefault("llama.cpp", {}).setdefault(concurrency, []).append(
                    baseline[concurrency]
                )
                print(
                    f"round {round_index + 1} {'llama.cpp':>16} concurrency {concurrency:3d}: "
                    f"{baseline[concurrency]:8.1f} tokens/s total"
                )
    _, peak = resident_memory_mib()
    print(f"peak RSS {peak:.0f} MiB")
    summary = {
        label: {count: median(rates) for count, rates in by_count.items()}
        for label, by_count in measured.items()
    }
    print(f"median of {args.rounds} round(s), decode tokens/s in total:")
    print("| weights | " + " | ".join(str(count) for count in args.concurrency) + " |")
    for label, by_count in summary.items():
        cells = " | ".join(f"{by_count[count]:.1f}" for count in args.concurrency)
        print(f"| {label} | {cells} |")
    if "llama.cpp" in summary:
        for label, by_count in summary.items():
            if label == "llama.cpp":
                continue
            ratios = " | ".join(
                f"{by_count[count] / summary['llama.cpp'][count]:.2f}" for count in args.concurrency
            )
            print(f"| {label} / llama.cpp | {ratios} |")
    return summary


if __name__ == "__main__":
    main()
