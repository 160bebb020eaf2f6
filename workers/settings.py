"""Settings of the worker process, read from SPATE_* environment variables and flags."""

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

    # A served name (the default model), a .gguf file or a Hugging Face style folder.
    model: str = DEFAULT_MODEL
    # The name clients use; defaults to the model's own name.
    served_model_name: str | None = None
    worker_id: str = Field(default_factory=default_worker_id)
    kernels: str = "auto"
    # Weights, activations and KV cache. auto: bfloat16 on a GPU; float32 on a CPU, whose
    # dense linears compute in bfloat16 where it has native bf16 (AVX512-BF16 or AMX).
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # What the linear layers compute with on a CPU: `quantized` (the GGUF file's own 4/8-bit
    # groups: the fused CPU op, exact in float32, or torch's int4/int8 matmuls without it),
    # `bf16` (dense weights in `dtype`), or `auto`: quantized where the fused CPU ops run
    # on a quantized GGUF file, bf16 elsewhere (workers.model.loader says why).
    weights: Literal["auto", "quantized", "bf16"] = "auto"
    max_num_seqs: int = Field(default=64, ge=1)
    # Requests taken from the queue past max_num_seqs, waiting in the engine: the
    # scheduler shares the batch fairly between the owners of what it holds, so a
    # window past one key's backlog (SPATE_KEY_MAX_BACKGROUND) lets another key's request
    # in ahead of it. Held requests are not free for the model's other workers.
    max_waiting: int = Field(default=64, ge=0)
    # Deliveries of a request that no worker finished preparing (its prompt and grammar
    # built) before it fails as a poison request: a request that crashes workers while
    # being prepared takes this many down at most, not every one in turn.
    max_prepare_tries: int = Field(default=2, ge=1)
    # A request's grammar (schema, regex, choices, EBNF, tool calls) compiles in a child
    # process within this time and resident memory, or the request fails naming the field
    # (workers/engine/grammar_budget.py).
    grammar_timeout_s: float = Field(default=10.0, gt=0)
    grammar_memory_bytes: int = Field(default=2 * 1024**3, ge=64 * 1024**2)
    # Threads of the CPU path's decode steps (prefill uses every core); None: every usable
    # core. `spate serve` leaves one core to the API and NATS on its machine (cli/main.py).
    num_threads: int | None = Field(default=None, ge=1)
    num_kv_blocks: int | None = Field(default=None, ge=1)
    # Longest sequence (prompt plus output) a request may reach; None: the model's context
    # length. The worker advertises it as the model's context length.
    max_model_len: int | None = Field(default=None, ge=2)
    # Prompt-lookup speculative decoding where it is exact (workers/engine/speculation.py):
    # it never changes the output, and drafts only where they are expected to pay.
    speculative_decoding: bool = True
    # JetStream redelivers a request whose worker stopped acking for this long.
    heartbeat_s: float = Field(default=2.0, gt=0)
    # Prometheus metrics on http://<metrics_host>:<metrics_port>/metrics; None: not served.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"
    # Where the worker writes one line saying why, when its model cannot load (it then
    # exits with code 78); `spate serve` names a file here to print that line as it stops.
    failure_file: str | None = None
