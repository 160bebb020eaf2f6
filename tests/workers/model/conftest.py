"""Shared fixtures: the default model loaded once, transformers' view of it, and tiny checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness.tiny_checkpoint import write_tiny_checkpoint
from workers.model import DEFAULT_MODEL, LoadedModel, load_model
from workers.model.loader import served_model_path

from .family_checkpoints import FamilyStore


@dataclass
class TinyModel:
    directory: Path
    config: dict
    state: dict[str, torch.Tensor]
    loaded: LoadedModel


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    return served_model_path(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def hf_gguf_tokenizer(smollm2_gguf_path: Path):
    """transformers' tokenizer for the same GGUF file: the independent side of parity tests."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(
        str(smollm2_gguf_path.parent), gguf_file=smollm2_gguf_path.name
    )


def _tiny(tmp_path_factory, architecture: str) -> TinyModel:
    directory = tmp_path_factory.mktemp(f"tiny-{architecture}")
    config, state = write_tiny_checkpoint(directory, architecture, seed=7)
    return TinyModel(directory, config, state, load_model(directory))


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> TinyModel:
    return _tiny(tmp_path_factory, "qwen3")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> TinyModel:
    return _tiny(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def families(tmp_path_factory) -> FamilyStore:
    """Each family's tiny checkpoint, transformers' logits and GGUF files, made on first use."""
    pytest.importorskip("transformers")
    return FamilyStore(tmp_path_factory.mktemp("families"))


@pytest.fixture(params=["tiny_qwen3", "tiny_llama"])
def tiny(request) -> TinyModel:
    return request.getfixturevalue(request.param)
