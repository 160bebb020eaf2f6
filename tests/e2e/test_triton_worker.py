"""A tiny real checkpoint served by workers on `--kernels triton` (Triton's interpreter
without a GPU) and `--kernels torch` gives the same greedy tokens; a model without
reasoning markers refuses a thinking budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.tiny_checkpoint import write_tiny_checkpoint
from kernels import BACKEND_OPS
from tests.conftest import Stack
from tests.processes import SpateProcess, wait_for

PROMPTS = ["The capital of France", "def add(a, b):", "Emoji 🤗 and accents"]


def served(stack: Stack) -> set[str]:
    return {model["id"] for model in httpx.get(f"{stack.base_url}/v1/models", timeout=5).json()["data"]}


@pytest.fixture(scope="module")
def tiny_workers(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    qwen3 = tmp_path_factory.mktemp("tiny-qwen3")
    llama = tmp_path_factory.mktemp("tiny-llama")
    write_tiny_checkpoint(Path(qwen3), "qwen3", seed=3)
    write_tiny_checkpoint(Path(llama), "llama", seed=4)
    names = {"tiny-triton": (qwen3, "triton"), "tiny-torch": (qwen3, "torch"), "tiny-llama": (llama, "torch")}
    workers = [
        SpateProcess(
            # float32: the two kernel sets are compared at full precision.
            ["worker", "--model", str(path), "--served-model-name", name, "--kernels", kernels,
             "--dtype", "float32", "--max-num-seqs", "4"],
            {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": name, "TRITON_INTERPRET": "1"},
            name,
        )
        for name, (path, kernels) in names.items()
    ]
    try:
        ready = wait_for(lambda: set(names) <= served(stack) or not all(w.alive() for w in workers), 300, 0.5)
        assert ready and all(w.alive() for w in workers), "\n".join(w.output()[-2000:] for w in workers)
        for worker, (_, kernels) in zip(workers, names.values(), strict=True):
            # The start line names the backend asked for, in words, with no fallback.
            assert f"kernels: {BACKEND_OPS[kernels]}," in worker.output(), worker.output()[-2000:]
        yield {name: kernels for name, (_, kernels) in names.items()}
    finally:
        for worker in workers:
            worker.stop()


def greedy_tokens(stack: Stack, model: str, prompt: str) -> list[int]:
    reply = httpx.post(f"{stack.base_url}/v1/responses", timeout=300, json={
        "model": model, "input": prompt, "temperature": 0, "max_output_tokens": 6,
        "ignore_eos": True, "enable_response_messages": True,
    })
    assert reply.status_code == 200, reply.text
    return reply.json()["output_messages"][0]["tokens"]


def test_triton_and_torch_workers_agree(stack: Stack, tiny_workers: dict[str, str]) -> None:
    for prompt in PROMPTS:
        torch_tokens = greedy_tokens(stack, "tiny-torch", prompt)
        assert len(torch_tokens) == 6
        assert greedy_tokens(stack, "tiny-triton", prompt) == torch_tokens, prompt


def test_budget_on_a_model_without_reasoning_markers_is_400(stack: Stack, tiny_workers: dict[str, str]) -> None:
    reply = httpx.post(f"{stack.base_url}/v1/responses", timeout=60, json={
        "model": "tiny-llama", "input": "Hi", "thinking_token_budget": 8,
    })
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "thinking_token_budget"
    unlimited = httpx.post(f"{stack.base_url}/v1/responses", timeout=120, json={
        "model": "tiny-llama", "input": "Hi", "thinking_token_budget": -1, "max_output_tokens": 2,
    })
    assert unlimited.status_code == 200, unlimited.text
