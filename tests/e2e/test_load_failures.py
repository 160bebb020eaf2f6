"""A model a worker cannot load says so through the API: /ready, /v1/models and a request
for it name the model and the reason, the worker exits with the code that tells `spate
serve` not to start it again, and a worker that then loads the model clears the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import httpx
import openai
import pytest

from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT, Stack
from tests.processes import SpateProcess, wait_for
from workers.load_failure import EXIT_CODE

# Longest a worker takes to start, read a file's header and give up (imports included).
REFUSAL_TIMEOUT_S = 180


def write_unsupported_gguf(path: Path) -> Path:
    """A GGUF file of an architecture spate does not serve (a state-space model's)."""
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def refused_worker(stack: Stack, model: Path, worker_id: str) -> SpateProcess:
    """A worker pointed at `model`, run until it gives up."""
    worker = SpateProcess(["worker", "--model", str(model)],
                          {"SPATE_NATS_URL": stack.nats_url, "SPATE_WORKER_ID": worker_id},
                          worker_id)
    assert wait_for(lambda: not worker.alive(), REFUSAL_TIMEOUT_S, 0.2), worker.output()[-3000:]
    worker.stop()
    return worker


def test_an_unsupported_architecture_is_named_by_ready_models_and_requests(
    api_server: Stack, tmp_path: Path
) -> None:
    model = write_unsupported_gguf(tmp_path / "unloadable-mamba.gguf")
    worker = refused_worker(api_server, model, "refused-gguf")
    assert worker.process.returncode == EXIT_CODE
    output = worker.output()
    assert "Traceback" not in output, output[-3000:]
    [line] = [line for line in output.splitlines() if "cannot load model" in line]
    assert "unsupported GGUF architecture 'mamba'" in line and "supported:" in line

    ready = httpx.get(f"{api_server.base_url}/ready", timeout=10).json()
    reason = ready["load_failures"]["unloadable-mamba"]
    assert "'mamba'" in reason and "supported:" in reason

    listed = httpx.get(f"{api_server.base_url}/v1/models", timeout=10).json()
    assert "unloadable-mamba" not in {model["id"] for model in listed["data"]}
    [failure] = [f for f in listed["load_failures"] if f["id"] == "unloadable-mamba"]
    assert failure["error"] == {"code": "model_load_failed", "message": reason}
    # The list keeps the shape the SDK validates strictly.
    client = openai.OpenAI(base_url=f"{api_server.base_url}/v1", api_key="unused",
                           _strict_response_validation=True)
    assert "unloadable-mamba" not in {model.id for model in client.models.list()}

    body = {"model": "unloadable-mamba", "input": "Hi", "max_output_tokens": 4}
    reply = httpx.post(f"{api_server.base_url}/v1/responses", json=body, timeout=10)
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert error["code"] == "model_load_failed" and error["param"] == "model"
    assert error["message"] == f"The model 'unloadable-mamba' could not be loaded: {reason}"
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="unloadable-mamba", input="Hi", max_output_tokens=4)
    assert refused.value.status_code == 503 and "mamba" in refused.value.message


def test_a_folder_whose_config_cannot_load_is_refused_the_same_way(
    api_server: Stack, tmp_path: Path
) -> None:
    folder = tmp_path / "unloadable-folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "vocab_size": 16}
    ))
    worker = refused_worker(api_server, folder, "refused-folder")
    assert worker.process.returncode == EXIT_CODE
    assert "Traceback" not in worker.output()

    body = {"model": "unloadable-folder", "input": "Hi", "max_output_tokens": 4}
    reply = httpx.post(f"{api_server.base_url}/v1/responses", json=body, timeout=10)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "model_load_failed"
    assert "MambaForCausalLM" in reply.json()["error"]["message"]


def test_a_worker_that_loads_the_model_clears_the_report(api_server: Stack, tmp_path: Path) -> None:
    name = "unloadable-then-fixed"
    model = write_unsupported_gguf(tmp_path / f"{name}.gguf")
    refused_worker(api_server, model, "refused-then-fixed")
    assert name in httpx.get(f"{api_server.base_url}/ready", timeout=10).json()["load_failures"]

    fixed = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", name, "--max-num-seqs", "2"],
        {"SPATE_NATS_URL": api_server.nats_url, "SPATE_WORKER_ID": "fixed"}, "fixed-worker",
    )
    try:
        def served() -> bool:
            listed = httpx.get(f"{api_server.base_url}/v1/models", timeout=5).json()
            return name in {model["id"] for model in listed["data"]} or not fixed.alive()

        assert wait_for(served, MODEL_LOAD_TIMEOUT, 0.5)
        assert fixed.alive(), fixed.output()[-3000:]
        listed = httpx.get(f"{api_server.base_url}/v1/models", timeout=5).json()
        assert name not in {failure["id"] for failure in listed["load_failures"]}
        body = {"model": name, "input": "Hi", "max_output_tokens": 2, "temperature": 0}
        reply = httpx.post(f"{api_server.base_url}/v1/responses", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
    finally:
        fixed.stop()
    # Gone with its worker, the model is not served, and nothing says it failed to load.
    reply = httpx.post(f"{api_server.base_url}/v1/responses", json=body, timeout=10)
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "model_unavailable"


def test_spate_serve_stops_at_once_naming_the_reason(tmp_path: Path) -> None:
    model = write_unsupported_gguf(tmp_path / "served-mamba.gguf")
    serve = subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", "--model", str(model),
         "--port", str(free_port()), "--nats-port", str(free_port())],
        cwd=tmp_path, env=os.environ.copy(),
        capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S,
    )
    output = serve.stdout + serve.stderr
    assert serve.returncode == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "starting it again" not in output  # no restart of a worker that cannot load
    [stopped] = [line for line in output.splitlines() if "stopping spate" in line]
    assert "the worker cannot start (cannot load model" in stopped
    assert "unsupported GGUF architecture 'mamba'" in stopped
