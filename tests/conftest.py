"""Session fixtures: a real nats-server, the API and a worker with the default model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cli.nats_server import EmbeddedNats, free_port
from tests.processes import SpateProcess, wait_http

# Without a GPU the Triton kernels run under triton's interpreter, which triton reads when
# a kernel is defined: it must be set here, before any test module imports `kernels`.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
MODEL_LOAD_TIMEOUT = 600


@dataclass
class Stack:
    nats_url: str
    base_url: str
    api: SpateProcess
    worker: SpateProcess | None = None
    # The stack's worker serves Prometheus metrics here.
    worker_metrics_url: str | None = None


@pytest.fixture(scope="session")
def nats_server() -> Iterator[EmbeddedNats]:
    with EmbeddedNats() as server:
        yield server


@pytest.fixture(scope="session")
def api_server(nats_server: EmbeddedNats) -> Iterator[Stack]:
    port = free_port()
    # JSON logs on the session's API and worker: tests/e2e/test_logs.py reads them.
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": nats_server.url, "SPATE_LOG_FORMAT": "json"}, "api")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base_url}/health", api, timeout=60)
        yield Stack(nats_server.url, base_url, api)
    finally:
        api.stop()


@pytest.fixture(scope="session")
def stack(api_server: Stack) -> Iterator[Stack]:
    """The API plus one worker serving the default model, ready for requests."""
    metrics_port = free_port()
    worker = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--max-num-seqs", "16",
         "--metrics-port", str(metrics_port)],
        {"SPATE_NATS_URL": api_server.nats_url, "SPATE_WORKER_ID": "test-worker",
         "SPATE_LOG_FORMAT": "json"},
        "worker",
    )
    try:
        wait_http(f"{api_server.base_url}/ready", worker, timeout=MODEL_LOAD_TIMEOUT)
        yield Stack(api_server.nats_url, api_server.base_url, api_server.api, worker,
                    f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        worker.stop()
