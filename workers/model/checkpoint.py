"""Checkpoint: what a file-format loader hands over before the model is built."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.model.config import ModelConfig
from workers.model.group_quantized import GroupQuantized
from workers.model.k_quants import KQuantized
from workers.model.tokenizer import Tokenizer

NamedTensors = Iterator[tuple[str, torch.Tensor]]
QuantizedTensors = Iterator[tuple[str, GroupQuantized | KQuantized]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A parsed checkpoint: config, tokenizer and chat template now, tensors on demand.

    `read_weights(dtype)` yields Hugging Face tensor names (`model.layers.0.self_attn.q_proj.weight`)
    in `dtype`, whatever the file's own naming and quantization, with a progress bar.
    `read_quantized()`, where the file stores weights quantized (GGUF), yields those it can
    decode exactly (`GroupQuantized`, `KQuantized`) under the same names; None for dense files.
    """

    name: str
    config: ModelConfig
    tokenizer: Tokenizer
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    read_weights: Callable[[torch.dtype], NamedTensors]
    # generation_config.json of a Hugging Face folder (recommended sampling values).
    generation_config: dict[str, Any] = field(default_factory=dict)
    read_quantized: Callable[[], QuantizedTensors] | None = None
