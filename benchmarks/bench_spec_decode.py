"""Speculative decoding's worth: decode tokens per second with prompt-lookup drafting on
and off, on a repetitive workload (quoting and editing a given text, JSON, tool arguments)
and on plain prose, at 1 and 8 streams, on the default model as a worker serves it.

    .venv/bin/python benchmarks/bench_spec_decode.py [--streams 1 8] [--tokens 128]
        [--rounds 3] [--workloads repetitive prose]

Both settings run the same greedy requests, rounds alternated, on one engine each; their
outputs are the same tokens (checked), so the same work is timed. A run's time starts once
every prompt is prefilled; the medians of the rounds and their ratio are printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.model.host import shorten_openmp_spin  # noqa: E402

shorten_openmp_spin()  # before torch loads, as a worker does

import torch  # noqa: E402

from workers.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from workers.engine.speculation import SpeculationConfig  # noqa: E402
from workers.model import (  # noqa: E402
    DEFAULT_MODEL,
    load_model,
    serving_dtype,
    serving_matmul_dtype,
)
from workers.model.loader import LoadedModel  # noqa: E402

PASSAGES = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, lit the great "
    "lamp, wound the clockwork that turned the lens, and wrote the weather in his log.",
    "Bees visit thousands of flowers to gather nectar, carry it home in their honey "
    "stomachs, and pass it from bee to bee until enough water has gone for it to keep.",
    "A compiler reads the source text, splits it into tokens, parses them into a tree, "
    "checks the types, and finally writes machine code that the processor can run.",
    "The tide rises and falls twice a day because the moon pulls on the oceans, and the "
    "sun adds its own smaller pull, making spring tides and neap tides in turn.",
)
REPETITIVE = (
    "Repeat this text exactly and nothing else:\n\n{passage}",
    "Fix the spelling in this text and return all of it: {passage}",
    'Return this JSON with "done" set to true: {{"task": "{passage}", "done": false, '
    '"tags": ["notes", "draft"], "owner": "sam"}}',
    "Call the function save_note with arguments as JSON, the text being: {passage}",
)
PROSE = (
    "Write a long essay about the history of Rome.",
    "Write a story about a dragon who learns to bake bread.",
    "Explain how the water cycle works, in detail.",
    "Describe a walk through a forest in autumn.",
)
WORKLOADS = ("repetitive", "prose")


def workload_prompts(loaded: LoadedModel, workload: str, count: int) -> list[list[int]]:
    prompts = []
    for index in range(count):
        if workload == "repetitive":
            template = REPETITIVE[index % len(REPETITIVE)]
            question = template.format(passage=PASSAGES[(index // len(REPETITIVE)) % len(PASSAGES)])
        else:
            question = PROSE[index % len(PROSE)]
        text = loaded.chat_template.render([{"role": "user", "content": question}])
        prompts.append(loaded.tokenizer.encode(text))
    return prompts


def timed_run(
    engine: LLMEngine, prompts: list[list[int]], tokens: int, label: str
) -> tuple[float, float, int, list[list[int]]]:
    """Seconds from the last prefill to the end, on the clock and of this process's CPU
    time, tokens generated meanwhile, and every request's tokens."""
    params = SamplingParams.of(temperature=0.0, max_output_tokens=tokens)
    outputs: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        request_id = f"{label}-{index}"
        outputs[request_id] = []
        engine.add_request(request_id, prompt, params)
    while engine.scheduler.waiting:
        for output in engine.step():
            outputs[output.request_id].extend(output.new_token_ids)
    before = sum(len(ids) for ids in outputs.values())
    started, cpu_started = time.perf_counter(), time.process_time()
    while engine.has_unfinished_requests():
        for output in engine.step():
            outputs[output.request_id].extend(output.new_token_ids)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    generated = sum(len(ids) for ids in outputs.values()) - before
    return seconds, cpu_seconds, generated, list(outputs.values())


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> dict[tuple[str, int], dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=128, help="at most, per stream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--num-kv-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="default: every usable core")
    args = parser.parse_args(argv)

    dtype = serving_dtype("cpu")
    # What a worker loads by default: weights "auto" (quantized where the fused ops run).
    loaded = load_model(args.model, dtype=dtype, weights="auto",
                        matmul_dtype=serving_matmul_dtype("cpu", dtype))
    engines = {
        setting: LLMEngine(loaded, EngineConfig(
            num_kv_blocks=args.num_kv_blocks, max_num_seqs=max(args.streams),
            num_threads=args.threads, speculation=SpeculationConfig(enabled=setting == "on"),
        ))
        for setting in ("off", "on")
    }
    speculator = engines["on"].speculator
    if speculator is None:
        raise SystemExit(f"{loaded.name} ({loaded.weights} weights) gives prefilled rows other "
                         "bits than decode steps here, so the engine does not speculate")
    print(f"model {loaded.name} ({loaded.weights} weights), {torch.get_num_threads()} threads")
    summary: dict[tuple[str, int], dict[str, float]] = {}
    for workload in args.workloads:
        for streams in args.streams:
            prompts = workload_prompts(loaded, workload, streams)
            rates: dict[str, list[float]] = {"off": [], "on": []}
            cpu_rates: dict[str, list[float]] = {"off": [], "on": []}
            drafted = accepted = 0
            for round_index in range(args.rounds):
                results = {}
                # Alternated, so neither setting always gets the quieter moment.
                order = ("off", "on") if round_index % 2 == 0 else ("on", "off")
                for setting in order:
                    stats_before = (speculator.stats.draft_tokens, speculator.stats.accepted_tokens)
                    seconds, cpu_seconds, generated, tokens = timed_run(
                        engines[setting], prompts, args.tokens, f"{workload}-{streams}-{round_index}"
                    )
                    if setting == "on":
                        drafted += speculator.stats.draft_tokens - stats_before[0]
                        accepted += speculator.stats.accepted_tokens - stats_before[1]
                    results[setting] = tokens
                    rates[setting].append(generated / seconds)
                    cpu_rates[setting].append(generated / cpu_seconds)
                if results["on"] != results["off"]:
                    raise SystemExit(f"{workload} at {streams} streams: speculation changed the output")
            off, on = median(rates["off"]), median(rates["on"])
            cpu_off, cpu_on = median(cpu_rates["off"]), median(cpu_rates["on"])
            kept = accepted / drafted if drafted else 0.0
            summary[(workload, streams)] = {
                "off": off, "on": on, "ratio": on / off, "cpu_off": cpu_off, "cpu_on": cpu_on,
                "cpu_ratio": cpu_on / cpu_off, "drafted": drafted, "kept": kept,
            }
            print(f"{workload:>10} {streams:2d} streams: off {off:7.1f} tok/s, on {on:7.1f} "
                  f"tok/s, {on / off:.2f}x; per CPU second {cpu_off:.1f} and {cpu_on:.1f}, "
                  f"{cpu_on / cpu_off:.2f}x ({drafted} draft tokens, {kept:.0%} kept)")
    # Per CPU second as well: where other work shares the cores, the clock measures
    # their load as much as this engine, the process's own CPU time much less so.
    print(f"median of {args.rounds} round(s), decode tokens in total per second (on the "
          f"clock, and per second of this process's CPU time), greedy, at most "
          f"{args.tokens} tokens a stream:")
    print("| workload | streams | off tok/s | on tok/s | on / off | off tok/CPU-s | "
          "on tok/CPU-s | on / off | draft tokens kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (workload, streams), row in summary.items():
        print(f"| {workload} | {streams} | {row['off']:.1f} | {row['on']:.1f} | "
              f"{row['ratio']:.2f} | {row['cpu_off']:.1f} | {row['cpu_on']:.1f} | "
              f"{row['cpu_ratio']:.2f} | {row['kept']:.0%} of {row['drafted']:.0f} |")
    return summary


if __name__ == "__main__":
    main()
