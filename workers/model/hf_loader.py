"""Reads a Hugging Face model directory: config.json, *.safetensors, tokenizer.json and the template."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open

from workers.model.checkpoint import Checkpoint, NamedTensors
from workers.model.hf_config import read_hf_config, token_ids
from workers.model.hf_files import (
    chat_template,
    read_backend_tokenizer,
    read_config_json,
    read_json,
    token_text,
)
from workers.model.load_progress import load_progress
from workers.model.tokenizer import Tokenizer, chat_eos_token_ids


def _read_tensors(
    files: list[Path], dtype: torch.dtype, label: str, shifted_norms: bool
) -> NamedTensors:
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(path), framework="pt")) for path in files]
        names = [(handle, name) for handle in handles for name in handle.keys()]
        for handle, name in load_progress(names, label):
            tensor = handle.get_tensor(name)
            if shifted_norms and name.endswith("norm.weight"):
                # Gemma's norms multiply by (1 + weight), computed in float32 as
                # transformers does; the model's norms multiply by what they hold.
                tensor = tensor.float() + 1.0
            yield name, tensor.to(dtype)


def read_hf_directory(directory: Path, name: str | None = None) -> Checkpoint:
    config = read_hf_config(read_config_json(directory))
    backend = read_backend_tokenizer(directory)
    tokenizer_config = read_json(directory / "tokenizer_config.json")
    generation_config = read_json(directory / "generation_config.json")
    template = chat_template(directory, tokenizer_config)

    bos_token = token_text(tokenizer_config.get("bos_token"))
    eos_token = token_text(tokenizer_config.get("eos_token"))
    eos_ids = list(config.eos_token_ids) + token_ids(generation_config.get("eos_token_id"))
    eos_token_id = backend.token_to_id(eos_token) if eos_token is not None else None
    if eos_token_id is not None:
        eos_ids.append(eos_token_id)
    if not eos_ids:
        raise ValueError(f"{directory} names no eos token")
    if eos_token is None:
        eos_token = backend.id_to_token(eos_ids[0])
    bos_id = config.bos_token_id
    if bos_token is None and bos_id is not None:
        bos_token = backend.id_to_token(bos_id)
    tokenizer = Tokenizer(backend, chat_eos_token_ids(backend, eos_ids, template), bos_id)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model only {config.vocab_size}"
        )

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory} has no *.safetensors files")
    label = name or directory.name
    return Checkpoint(
        name=label,
        config=config,
        tokenizer=tokenizer,
        chat_template=template,
        bos_token=bos_token,
        eos_token=eos_token,
        read_weights=lambda dtype: _read_tensors(
            files, dtype, label, shifted_norms=config.architecture == "gemma3"
        ),
        generation_config=generation_config,
    )
