"""Reads a llama.cpp GGUF file: config from metadata, dequantized tensors, tokenizer and template."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from tqdm import tqdm

from workers.model.checkpoint import Checkpoint, NamedTensors, QuantizedTensors
from workers.model.config import ModelConfig
from workers.model.gguf_tokenizer import build_gguf_tokenizer, read_gguf_vocabulary
from workers.model.group_quantized import SUPPORTED_TYPES, decode_blocks
from workers.model.tokenizer import Tokenizer, chat_eos_token_ids

SUPPORTED_ARCHITECTURES = ("llama", "qwen3")

# GGUF per-layer tensor name -> Hugging Face name inside `model.layers.N.`.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _hf_name(name: str) -> str:
    stem, _, suffix = name.rpartition(".")
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    raise ValueError(f"GGUF tensor {name!r} is not one this loader knows")


def unpermute_rope_rows(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's converter, which interleaves each head's rows for GPT-J style rope.

    The forward pass uses neox style (rotate halves) like Hugging Face, so each head's rows
    go back from (pair, half) order to (half, pair) order. Works for weights and biases.
    """
    rows = tensor.shape[0]
    head_dim = rows // num_heads
    grouped = tensor.reshape(num_heads, head_dim // 2, 2, -1)
    return grouped.transpose(1, 2).reshape(tensor.shape)


def read_gguf_config(reader: gguf.GGUFReader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}"
        )
    names = {tensor.name for tensor in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ValueError("GGUF files with rope_freqs (scaled rope) are not supported")
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    return ModelConfig(
        architecture=arch,
        vocab_size=int(_field(reader, f"{arch}.vocab_size", len(tokens))),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_field(reader, f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, f"{arch}.attention.key_length", hidden // heads)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        max_position_embeddings=int(_field(reader, f"{arch}.context_length")),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
        attention_bias="blk.0.attn_q.bias" in names,
    )


def _read_tensors(
    reader: gguf.GGUFReader, config: ModelConfig, dtype: torch.dtype, label: str
) -> NamedTensors:
    # llama.cpp permutes q/k only for the llama architecture; qwen3 is stored as trained.
    permuted = config.architecture == "llama"
    for tensor in tqdm(reader.tensors, desc=f"Loading {label}", unit="tensor"):
        name = _hf_name(tensor.name)
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(
            np.float32, copy=False
        )
        if not values.flags.writeable:
            # Unquantized tensors come back as views of the read-only memory map.
            values = values.copy()
        weight = torch.from_numpy(np.ascontiguousarray(values))
        if permuted and ".self_attn.q_proj." in name:
            weight = unpermute_rope_rows(weight, config.num_heads)
        elif permuted and ".self_attn.k_proj." in name:
            weight = unpermute_rope_rows(weight, config.num_kv_heads)
        yield name, weight.to(dtype)


def _read_quantized(reader: gguf.GGUFReader, config: ModelConfig) -> QuantizedTensors:
    permuted = config.architecture == "llama"
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            continue
        name = _hf_name(tensor.name)
        columns, rows = (int(size) for size in tensor.shape)  # GGUF lists the fastest axis first
        weight = decode_blocks(kind, tensor.data, rows, columns)
        if permuted and ".self_attn.q_proj." in name:
            weight = weight.map_rows(partial(unpermute_rope_rows, num_heads=config.num_heads))
        elif permuted and ".self_attn.k_proj." in name:
            weight = weight.map_rows(partial(unpermute_rope_rows, num_heads=config.num_kv_heads))
        yield name, weight


def read_gguf(path: Path, name: str | None = None) -> Checkpoint:
    """Parse the file's metadata now; tensors are dequantized when `read_weights` is iterated."""
    reader = gguf.GGUFReader(path)
    config = read_gguf_config(reader)
    tokens = list(_field(reader, "tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ValueError(f"{path} has no tokenizer vocabulary")
    backend = build_gguf_tokenizer(read_gguf_vocabulary(path))
    template = _field(reader, "tokenizer.chat_template")
    if not config.eos_token_ids:
        raise ValueError(f"{path} names no eos token")
    tokenizer = Tokenizer(
        backend,
        chat_eos_token_ids(backend, config.eos_token_ids, template),
        bos_token_id=config.bos_token_id,
    )
    label = name or path.stem
    return Checkpoint(
        name=label,
        config=config,
        tokenizer=tokenizer,
        chat_template=template,
        bos_token=None if config.bos_token_id is None else tokens[config.bos_token_id],
        eos_token=tokens[config.eos_token_ids[0]],
        read_weights=lambda dtype: _read_tensors(reader, config, dtype, label),
        read_quantized=lambda: _read_quantized(reader, config),
    )
