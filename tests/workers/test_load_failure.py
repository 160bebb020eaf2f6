"""What a worker says when its model cannot load: the name the model would have been
served under, and the reason as one line."""

from __future__ import annotations

from pathlib import Path

from workers.load_failure import REASON_CHARS, reason_of, served_name
from workers.settings import WorkerSettings


def test_the_served_name_is_the_one_a_loaded_checkpoint_would_get(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    assert served_name(WorkerSettings(model="/models/Qwen3-0.6B-Q4_K_M.gguf")) == "Qwen3-0.6B-Q4_K_M"
    assert served_name(WorkerSettings(model=f"{folder}/")) == "tiny-llama"
    assert served_name(WorkerSettings(model="SmolLM2-135M-Instruct")) == "SmolLM2-135M-Instruct"
    named = WorkerSettings(model="/models/a.gguf", served_model_name="chat")
    assert served_name(named) == "chat"


def test_a_reason_is_one_line_and_keeps_the_type_of_an_unexpected_error() -> None:
    refused = ValueError("unsupported GGUF architecture 'mamba';\n supported: ['llama']")
    assert reason_of(refused) == "unsupported GGUF architecture 'mamba'; supported: ['llama']"
    assert reason_of(FileNotFoundError(2, "No such file", "m.gguf")).startswith("[Errno 2]")
    assert reason_of(KeyError("tokenizer.ggml.tokens")) == "KeyError: 'tokenizer.ggml.tokens'"
    assert reason_of(MemoryError()) == "out of memory"
    long = reason_of(ValueError("x" * 5000))
    assert len(long) == REASON_CHARS and long.endswith("...")
