"""Reads a llama.cpp GGUF file: config from metadata, dequantized tensors, tokenizer and template."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gguf
import numpy as np
import torch

from workers.model.checkpoint import Checkpoint, NamedTensors, QuantizedTensors
from workers.model.config import ModelConfig
from workers.model.gguf_config import (
    PERMUTED_ARCHITECTURES,
    ROPE_TENSORS,
    field,
    hf_name,
    read_gguf_config,
)
from workers.model.gguf_metadata import read_gguf_header
from workers.model.gguf_tokenizer import build_gguf_tokenizer, read_gguf_vocabulary
from workers.model.gguf_types import refuse_unloadable_types
from workers.model.group_quantized import SUPPORTED_TYPES, decode_blocks
from workers.model.load_progress import load_progress
from workers.model.tokenizer import Tokenizer, chat_eos_token_ids


def unpermute_rope_rows(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's converter, which interleaves each head's rows for GPT-J style rope.

    The forward pass uses neox style (rotate halves) like Hugging Face, so each head's rows
    go back from (pair, half) order to (half, pair) order. Works for weights and biases.
    """
    rows = tensor.shape[0]
    head_dim = rows // num_heads
    grouped = tensor.reshape(num_heads, head_dim // 2, 2, -1)
    return grouped.transpose(1, 2).reshape(tensor.shape)


def _permuted(reader: gguf.GGUFReader) -> bool:
    # llama.cpp's converter interleaves q/k rows for the families it converts as Llama
    # (Mistral included); the others are stored as trained.
    return field(reader, "general.architecture") in PERMUTED_ARCHITECTURES


def _read_tensors(
    reader: gguf.GGUFReader, config: ModelConfig, dtype: torch.dtype, label: str
) -> NamedTensors:
    permuted = _permuted(reader)
    for tensor in load_progress(reader.tensors, label):
        if tensor.name in ROPE_TENSORS:
            continue
        name = hf_name(tensor.name, config.architecture)
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
    permuted = _permuted(reader)
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in SUPPORTED_TYPES or tensor.name in ROPE_TENSORS or len(tensor.shape) != 2:
            # 3-D expert tensors stay dense: the experts' op reads them stacked.
            continue
        name = hf_name(tensor.name, config.architecture)
        columns, rows = (int(size) for size in tensor.shape)  # GGUF lists the fastest axis first
        weight = decode_blocks(kind, tensor.data, rows, columns)
        if permuted and ".self_attn.q_proj." in name:
            weight = weight.map_rows(partial(unpermute_rope_rows, num_heads=config.num_heads))
        elif permuted and ".self_attn.k_proj." in name:
            weight = weight.map_rows(partial(unpermute_rope_rows, num_heads=config.num_kv_heads))
        yield name, weight


def read_gguf(path: Path, name: str | None = None) -> Checkpoint:
    """Parse the file's metadata now; tensors are dequantized when `read_weights` is iterated."""
    header = read_gguf_header(path)
    config = read_gguf_config(header)
    refuse_unloadable_types(header)
    reader = gguf.GGUFReader(path)
    tokens = list(field(reader, "tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ValueError(f"{path} has no tokenizer vocabulary")
    backend = build_gguf_tokenizer(read_gguf_vocabulary(path))
    template = field(reader, "tokenizer.chat_template")
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
