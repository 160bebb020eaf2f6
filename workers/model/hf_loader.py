"""Reads a Hugging Face model directory: config.json, *.safetensors, tokenizer.json and the template."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tokenizers import Tokenizer as BackendTokenizer
from tqdm import tqdm

from workers.model.checkpoint import Checkpoint, NamedTensors
from workers.model.config import ModelConfig
from workers.model.tokenizer import Tokenizer, chat_eos_token_ids

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as file:
        data: dict[str, Any] = json.load(file)
    return data


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json spells special tokens as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_hf_config(raw: dict[str, Any]) -> ModelConfig:
    architectures = raw.get("architectures") or []
    known = [ARCHITECTURES[a] for a in architectures if a in ARCHITECTURES]
    if not known:
        raise ValueError(
            f"unsupported architectures {architectures}; supported: {sorted(ARCHITECTURES)}"
        )
    if raw.get("mlp_bias"):
        raise ValueError("checkpoints with mlp_bias are not supported")
    if raw.get("use_sliding_window"):
        raise ValueError("checkpoints with sliding-window attention are not supported")
    # Newer transformers write rope settings under `rope_parameters`.
    rope = raw.get("rope_parameters") or {}
    rope_scaling = raw.get("rope_scaling") or (
        rope if rope.get("rope_type", "default") != "default" else None
    )
    heads = int(raw["num_attention_heads"])
    hidden = int(raw["hidden_size"])
    return ModelConfig(
        architecture=known[0],
        vocab_size=int(raw["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(raw.get("rope_theta", rope.get("rope_theta", 10000.0))),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=tuple(_ids(raw.get("eos_token_id"))),
        attention_bias=bool(raw.get("attention_bias", False)),
        rope_scaling=rope_scaling,
    )


def _chat_template(directory: Path, tokenizer_config: dict[str, Any]) -> str | None:
    # A standalone chat_template.jinja wins, as in transformers.
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {entry["name"]: entry["template"] for entry in template}
        template = named.get("default")
    return template


def _read_tensors(files: list[Path], dtype: torch.dtype, label: str) -> NamedTensors:
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(path), framework="pt")) for path in files]
        names = [(handle, name) for handle in handles for name in handle.keys()]
        for handle, name in tqdm(names, desc=f"Loading {label}", unit="tensor"):
            yield name, handle.get_tensor(name).to(dtype)


def read_hf_directory(directory: Path, name: str | None = None) -> Checkpoint:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{directory} has no config.json")
    raw = _read_json(config_file)
    config = read_hf_config(raw)
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ValueError(f"{directory} has no tokenizer.json")
    backend = BackendTokenizer.from_file(str(tokenizer_file))
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    generation_config = _read_json(directory / "generation_config.json")
    template = _chat_template(directory, tokenizer_config)

    bos_token = _token_text(tokenizer_config.get("bos_token"))
    eos_token = _token_text(tokenizer_config.get("eos_token"))
    eos_ids = list(config.eos_token_ids) + _ids(generation_config.get("eos_token_id"))
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
        read_weights=lambda dtype: _read_tensors(files, dtype, label),
        generation_config=generation_config,
    )
