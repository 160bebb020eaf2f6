"""Settings of the worker process, read from SPATE_* environment variables and flags.

Each field's `description` is its row in docs/configuration.md
(`python -m cli.configuration_doc`).
"""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from journal import JournalSettings

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(JournalSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore", protected_namespaces=())

    model: str = Field(default=DEFAULT_MODEL,
                       description="served name, `.gguf` file or model folder (`--model`)")
    served_model_name: str | None = Field(
        default=None,
        description="the name clients ask for (`--served-model-name`)",
        json_schema_extra={"shown_default": "the model's name"})
    worker_id: str = Field(
        default_factory=default_worker_id,
        description="this worker's name in the model registry, its request subject and its "
        "log lines",
        json_schema_extra={"shown_default": "`<hostname>-<pid>`"})
    kernels: str = Field(
        default="auto",
        description="`auto` (Triton on CUDA; on a CPU the fused C++ ops of "
        "`kernels/cpu_ops.py`, built once per machine with the system's `g++`, or torch "
        "where they cannot build), `triton`, `cpu`, `torch` (`--kernels`)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="`auto` (bfloat16 on a GPU; float32 on a CPU, whose dense linears "
        "compute in bfloat16 where it has native bf16: AVX512-BF16 or AMX), `float32`, "
        "`bfloat16`, `float16` (`--dtype`); the residual stream stays float32 in every dtype")
    # workers.model.loader says why `auto` chooses as it does.
    weights: Literal["auto", "quantized", "bf16"] = Field(
        default="auto",
        description="what the CPU path's linear layers compute with (`--weights`, also on "
        "`spate serve`): `quantized`, the GGUF file's own 4-bit (Q4_0/Q4_1) and 8-bit (Q8_0) "
        "groups and K-quant super-blocks (Q4_K/Q5_K/Q6_K), read as stored and computed "
        "exactly in float32 by the fused CPU op (torch's bf16 int4/int8 matmuls where the "
        "fused ops do not build), about half the resident weight memory; `bf16`, dense "
        "weights in the model dtype, prepacked (the faster setting for many concurrent "
        "streams on a CPU with AMX); `auto`, quantized where the fused CPU ops run on a "
        "quantized GGUF file, bf16 elsewhere (docs/performance.md has the figures)")
    max_num_seqs: int = Field(
        default=64, ge=1,
        description="sequences one worker runs at once (`--max-num-seqs`)")
    # A window past one key's backlog (SPATE_KEY_MAX_BACKGROUND) lets another key's
    # request in ahead of it. Held requests are not free for the model's other workers.
    max_waiting: int = Field(
        default=64, ge=0,
        description="requests a worker takes from the queue past `SPATE_MAX_NUM_SEQS`, "
        "waiting in its scheduler, which shares the batch fairly between API keys among "
        "what it holds")
    max_prepare_tries: int = Field(
        default=2, ge=1,
        description="deliveries of a request that no worker finished preparing (prompt and "
        "grammar built) before the next worker fails it (`server_error`) instead of trying "
        "once more: a request that crashes workers takes this many down at most")
    # workers/engine/grammar_budget.py
    grammar_timeout_s: float = Field(
        default=10.0, gt=0,
        description="a request's grammar (schema, regex, choices, EBNF, tool calls) compiles "
        "in a child process within this time and resident memory; past either the child is "
        "killed and the response fails with a 400-class error naming the field")
    grammar_memory_bytes: int = Field(default=2 * 1024**3, ge=64 * 1024**2,
                                      json_schema_extra={"row": "grammar_timeout_s"})
    # `spate serve` leaves one core to the API and NATS on its machine (cli/main.py).
    num_threads: int | None = Field(
        default=None, ge=1,
        description="threads of the CPU path's decode steps (`--num-threads`; prefill steps "
        "and decode steps of 4 or more sequences use every core)",
        json_schema_extra={"shown_default": "every usable core"})
    num_kv_blocks: int | None = Field(
        default=None, ge=1, description="KV-cache blocks of 16 tokens",
        json_schema_extra={"shown_default": "sized from memory"})
    max_model_len: int | None = Field(
        default=None, ge=2,
        description="the longest a sequence (prompt plus output) may grow, advertised as the "
        "model's context length; a response that reaches it without `max_output_tokens` "
        "ends `incomplete`, with a `message` in its `incomplete_details` and a line in the "
        "worker's log saying so",
        json_schema_extra={"shown_default": "the model's context length"})
    # workers/engine/speculation.py
    speculative_decoding: bool = Field(
        default=True,
        description="prompt-lookup speculative decoding: a decode step verifies tokens "
        "guessed from the response's own prompt and output, and keeps those the model would "
        "have produced anyway (the output is the same, bit for bit); only on the CPU path, "
        "where that holds, in decode steps of at most 2 sequences, and only where a "
        "sequence's guesses have been paying (docs/internals.md)")
    heartbeat_s: float = Field(
        default=2.0, gt=0,
        description="how often a worker renews its liveness (within `SPATE_WORKER_TTL_S`) "
        "and reports its load; every third of `SPATE_ACK_WAIT_S` it also tells JetStream "
        "that the requests it holds are in progress")
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535,
        description="serve the worker's Prometheus metrics at "
        "`http://SPATE_METRICS_HOST:PORT/metrics` (`--metrics-port` of `spate worker` and "
        "`spate serve`); the API always serves its own at `/metrics`",
        json_schema_extra={"shown_default": "unset (not served)"})
    metrics_host: str = Field(
        default="127.0.0.1",
        description="address the worker's metrics listen on (`0.0.0.0` in a container)")
    failure_file: str | None = Field(
        default=None,
        description="where a worker whose model cannot load writes the one-line reason before "
        "it exits with code 78 (`spate serve` sets it and prints the line as it stops)")
