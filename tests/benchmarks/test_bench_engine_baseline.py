"""The engine benchmark reads llama.cpp's batched-bench table for its baseline."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_engine import parse_batched_bench  # noqa: E402

# As llama-batched-bench printed it on the default model's GGUF file.
OUTPUT = """
llama_batched_bench: n_kv_max = 8192, n_batch = 2048, n_ubatch = 512, flash_attn = -1, is_pp_shared = 0, is_tg_separate = 0, n_gpu_layers = -1, n_threads = 2, n_threads_batch = 2

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|    64 |    128 |    1 |    192 |    0.218 |   293.56 |    0.919 |   139.25 |    1.137 |   168.84 |
|    64 |    128 |    8 |   1536 |    1.439 |   355.76 |    5.354 |   191.27 |    6.793 |   226.12 |
|    64 |    128 |   32 |   6144 |    6.060 |   337.97 |   14.902 |   274.85 |   20.962 |   293.10 |
"""


def test_generation_rate_per_parallel_sequence_count() -> None:
    assert parse_batched_bench(OUTPUT) == {1: 139.25, 8: 191.27, 32: 274.85}


def test_no_table_gives_no_rates() -> None:
    assert parse_batched_bench("error: failed to load model\n") == {}
