"""Tiny random Qwen3 mixture-of-experts checkpoints written by transformers (float32), their
reference logits, and their GGUF files from llama.cpp's converter (once per test session).

Shapes follow family_checkpoints.py (every matmul's inner axis a multiple of 256, so the
quantized files hold real blocks). Four experts, two per token: a 12-token prompt sends
every expert some tokens and leaves some tokens out of each. `qwen3_moe` is sparse on every
layer with the top k renormalized, as llama.cpp reads every qwen3moe file (its converter
refuses dense layers); `qwen3_moe_mixed` keeps the raw softmax weights and makes dense the
layers `decoder_sparse_step` and `mlp_only_layers` say, so a model that made every layer
sparse, or none, fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from harness.tiny_checkpoint import build_tokenizer
from tests.llama_cpp_tools import convert_to_gguf, quantize

from .family_checkpoints import COMMON, HIDDEN, NEW_TOKENS, PROMPT, Reference, reference

MOE = {
    "num_hidden_layers": 3,
    "head_dim": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": HIDDEN,
}
SPECS: dict[str, dict[str, Any]] = {
    "qwen3_moe": {**MOE, "norm_topk_prob": True},
    # Sparse layers 1 and 3 by the step, and 3 made dense again: only layer 1 is sparse.
    "qwen3_moe_mixed": {**MOE, "num_hidden_layers": 4, "norm_topk_prob": False,
                        "decoder_sparse_step": 2, "mlp_only_layers": [3]},
}
CONVERTED = ("F16", "Q8_0")
# Router logits this far apart stay in order when Q8_0 rounds the weights; greedy tokens
# this far ahead stay ahead in the F16 file.
ROUTING_MARGIN = 0.03
GREEDY_MARGIN = 0.05
SEED_ATTEMPTS = 200


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that every part of the model, the router included, moves the
    logits (as family_checkpoints.py does)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.copy_(1.0 + 0.1 * noise)
            else:
                scale = 1.0 if "embed" in name else 1.5
                param.copy_(noise * scale / param.shape[-1] ** 0.5)


def _clear_of_ties(model: torch.nn.Module, top_k: int) -> bool:
    """Whether, over the prompt and its greedy continuation, every token's k-th expert is
    ROUTING_MARGIN ahead of the next in router logits, and every greedy token
    GREEDY_MARGIN ahead of the runner-up."""
    with torch.no_grad():
        ids = list(PROMPT)
        for _ in range(NEW_TOKENS):
            top = model(torch.tensor([ids])).logits[0, -1].topk(2)
            if (top.values[0] - top.values[1]).item() < GREEDY_MARGIN:
                return False
            ids.append(int(top.indices[0]))
        routers = model(torch.tensor([ids]), output_router_logits=True).router_logits
    return all(
        (top[:, top_k - 1] - top[:, top_k]).min().item() >= ROUTING_MARGIN
        for top in (logits.topk(top_k + 1, dim=-1).values for logits in routers)
    )


def write_moe_checkpoint(directory: Path, settings: dict[str, Any], seed: int = 13) -> Path:
    """The first seed from `seed` on whose answers no near tie decides: a rounded GGUF copy
    of weights whose router nearly ties picks another expert and answers otherwise, which
    says nothing of the loader."""
    import transformers

    tokenizer = build_tokenizer(with_think_tokens=True)
    config = transformers.Qwen3MoeConfig(
        **{**COMMON, **settings, "vocab_size": tokenizer.get_vocab_size() + 5}
    )
    config.architectures = ["Qwen3MoeForCausalLM"]
    for attempt in range(seed, seed + SEED_ATTEMPTS):
        torch.manual_seed(attempt)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _randomize(model, attempt)
        if _clear_of_ties(model.eval(), config.num_experts_per_tok):
            break
    else:
        raise RuntimeError(f"none of {SEED_ATTEMPTS} seeds answers clear of ties")
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    }))
    return directory


class MoeStore:
    """Each spec's checkpoint, reference and GGUF files, made once per test session."""

    def __init__(self, root: Path):
        self.root = root
        self._references: dict[str, Reference] = {}
        self._converted = False

    def directory(self, name: str) -> Path:
        directory = self.root / name
        if not (directory / "config.json").exists():
            write_moe_checkpoint(directory, SPECS[name])
        return directory

    def reference(self, name: str) -> Reference:
        if name not in self._references:
            self._references[name] = reference(self.directory(name))
        return self._references[name]

    def gguf(self, kind: str) -> Path:
        """The renormalized spec (llama.cpp's arithmetic) converted or quantized."""
        if not self._converted:
            convert_to_gguf([
                (self.directory("qwen3_moe"), self._path(converted), converted.lower())
                for converted in CONVERTED
            ])
            self._converted = True
        path = self._path(kind)
        if kind not in CONVERTED and not path.exists():
            quantize(self._path("F16"), path, kind)
        return path

    def _path(self, kind: str) -> Path:
        return self.root / f"qwen3_moe-{kind}.gguf"
