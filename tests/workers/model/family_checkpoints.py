"""Tiny random checkpoints of each served family, written by transformers itself (float32),
with a small trained byte-level BPE tokenizer, transformers' own logits on them, and their
GGUF files from llama.cpp's converter and quantizer (FamilyStore, once per test session).

Shapes are tiny but a multiple of 256 along every matmul's inner axis, so llama-quantize
stores Q4_K / Q6_K blocks rather than falling back to another type. Windows are smaller than
the test sequence, so a model that ignored them would not match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.tiny_checkpoint import build_tokenizer
from tests.llama_cpp_tools import convert_to_gguf, quantize

HIDDEN = 256
WINDOW = 5
# A prompt longer than WINDOW, then greedy tokens: the sequence stays under every
# original context below (32), where transformers uses longrope's short factors.
PROMPT = [5, 77, 140, 12, 9, 201, 33, 64, 250, 17, 3, 120]
NEW_TOKENS = 8


@dataclass(frozen=True)
class FamilySpec:
    name: str  # the test id
    config_class: str  # transformers' config class
    settings: dict[str, Any] = field(default_factory=dict)
    # Whether llama.cpp's GGUF file carries all of it (Mistral's window is not written).
    gguf_exact: bool = True
    # Whether its quantized GGUF files (Q8_0, Q4_K_M) are tested: once per tensor layout.
    # The llama rope variants differ only in rope metadata, Mistral's file is written as
    # llama, and Granite's multipliers are metadata on llama's tensors; each of those is
    # tested at F16, which carries the same metadata and tensor names.
    quantized_layout: bool = True


COMMON = {
    "hidden_size": HIDDEN,
    "intermediate_size": 2 * HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}

SPECS = {
    spec.name: spec
    for spec in (
        FamilySpec("llama3", "LlamaConfig", {
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 32},
        }),
        FamilySpec("llama_linear", "LlamaConfig", {
            "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        }, quantized_layout=False),
        FamilySpec("llama_yarn", "LlamaConfig", {
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                "original_max_position_embeddings": 32},
        }, quantized_layout=False),
        FamilySpec("qwen2", "Qwen2Config", {"rope_parameters": {"rope_theta": 1e6}}),
        FamilySpec("mistral", "MistralConfig", {"sliding_window": WINDOW}, gguf_exact=False,
                   quantized_layout=False),
        FamilySpec("phi3", "Phi3Config", {
            "original_max_position_embeddings": 32,
            "rope_parameters": {
                "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                "original_max_position_embeddings": 32,
                # 24 rotated pairs of a 64-wide head at 0.75.
                "short_factor": [1.0 + 0.05 * i for i in range(24)],
                "long_factor": [2.0 + 0.25 * i for i in range(24)],
            },
        }),
        # Six layers: Gemma 3's five local layers to one global one, the pattern llama.cpp
        # assumes for a GGUF file (which does not carry it).
        FamilySpec("gemma3", "Gemma3TextConfig", {
            "num_hidden_layers": 6, "head_dim": 64, "query_pre_attn_scalar": 64,
            "sliding_window": WINDOW,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
            },
        }),
        FamilySpec("smollm3", "SmolLM3Config", {
            "num_hidden_layers": 4, "rope_parameters": {"rope_theta": 2e6},
            "tie_word_embeddings": True,
        }),
        FamilySpec("granite", "GraniteConfig", {
            "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
            "attention_multiplier": 0.09, "logits_scaling": 2.5,
        }, quantized_layout=False),
    )
}


def _randomize(model: torch.nn.Module, seed: int, gemma: bool) -> None:
    """Weights large enough that every part of the model moves the logits."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                # Gemma's norms multiply by (1 + weight).
                param.copy_((0.0 if gemma else 1.0) + 0.1 * noise)
            elif name.endswith("bias"):
                param.copy_(0.1 * noise)
            else:
                fan_in = param.shape[-1]
                param.copy_(noise * (1.0 if "embed" in name else 1.5) / fan_in**0.5)


def write_family_checkpoint(directory: Path, spec: FamilySpec, seed: int = 11) -> Path:
    """Write the checkpoint with transformers' save_pretrained; return the directory."""
    import transformers

    tokenizer = build_tokenizer(with_think_tokens=True)
    settings = {**COMMON, **spec.settings, "vocab_size": tokenizer.get_vocab_size() + 5}
    config = getattr(transformers, spec.config_class)(**settings)
    config.architectures = [architecture_of(spec.config_class)]
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _randomize(model, seed, gemma=spec.config_class.startswith("Gemma"))
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    # A GPT-2 style tokenizer class: llama.cpp's Phi-3 converter reads a tokenizer.json
    # only when it says so (else it wants a SentencePiece model).
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    }))
    return directory


def architecture_of(config_class: str) -> str:
    return {
        "LlamaConfig": "LlamaForCausalLM",
        "Qwen2Config": "Qwen2ForCausalLM",
        "MistralConfig": "MistralForCausalLM",
        "Phi3Config": "Phi3ForCausalLM",
        "Gemma3TextConfig": "Gemma3ForCausalLM",
        "SmolLM3Config": "SmolLM3ForCausalLM",
        "GraniteConfig": "GraniteForCausalLM",
        "Qwen3Config": "Qwen3ForCausalLM",
    }[config_class]


@dataclass(frozen=True)
class Reference:
    """transformers' answer: prefill logits [T, V] of PROMPT and its greedy continuation."""

    logits: torch.Tensor
    greedy: list[int]


def reference(directory: Path) -> Reference:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0].float()
        ids = list(PROMPT)
        # Each step recomputes the whole sequence: no cache of transformers' in the way.
        for _ in range(NEW_TOKENS):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return Reference(logits, ids[len(PROMPT):])


# llama.cpp's converter writes these; llama-quantize makes Q4_K_M from the F16 file.
CONVERTED = ("F16", "Q8_0")
QUANTIZED = ("Q8_0", "Q4_K_M")


class FamilyStore:
    """Each family's checkpoint, reference and GGUF files, made once per test session."""

    def __init__(self, root: Path):
        self.root = root
        self._references: dict[str, Reference] = {}
        self._converted = False

    def directory(self, name: str) -> Path:
        directory = self.root / name
        if not (directory / "config.json").exists():
            write_family_checkpoint(directory, SPECS[name])
        return directory

    def reference(self, name: str) -> Reference:
        if name not in self._references:
            self._references[name] = reference(self.directory(name))
        return self._references[name]

    def gguf(self, name: str, kind: str) -> Path:
        if kind in QUANTIZED and not SPECS[name].quantized_layout:
            raise ValueError(f"{name} is tested at F16 only: its tensors are llama's")
        if not self._converted:
            # Every file the converter writes in one process: importing torch and
            # transformers is most of a conversion.
            convert_to_gguf([
                (self.directory(family), self._path(family, converted), converted.lower())
                for family, spec in SPECS.items() for converted in CONVERTED
                if converted == "F16" or spec.quantized_layout
            ])
            self._converted = True
        path = self._path(name, kind)
        if kind == "Q4_K_M" and not path.exists():
            quantize(self._path(name, "F16"), path, kind)
        return path

    def _path(self, name: str, kind: str) -> Path:
        return self.root / f"{name}-{kind}.gguf"
