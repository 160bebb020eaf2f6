"""The model families spate serves: each architecture's model class and the names its
checkpoints go by. Torch-free, so the config and `spate models check` read it without
importing a model; the class is imported only when a model is built."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.model.llama import CausalLM


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    # `module:Class` of its model, a CausalLM (workers/model/llama.py) or a subclass.
    model: str
    # Hugging Face `architectures` entries of its checkpoints.
    hf_architectures: tuple[str, ...]
    # GGUF `general.architecture` values llama.cpp's converter writes for it. Mistral is
    # written as "llama" (without its window), so a Mistral GGUF file loads as llama.
    gguf_architectures: tuple[str, ...]
    # What the model file changes over the shared Llama layers, for `spate models check`.
    differences: str


_LLAMA = "workers.model.llama:CausalLM"

FAMILIES = {
    family.name: family
    for family in (
        Family("llama", _LLAMA, ("LlamaForCausalLM",), ("llama",),
               "rope scalings llama3, linear, yarn; GGUF rope_freqs"),
        Family("qwen2", _LLAMA, ("Qwen2ForCausalLM",), ("qwen2",), "q/k/v bias"),
        Family("qwen3", _LLAMA, ("Qwen3ForCausalLM",), ("qwen3",), "q/k norms"),
        Family("qwen3_moe", "workers.model.qwen3_moe:Qwen3MoeForCausalLM",
               ("Qwen3MoeForCausalLM",), ("qwen3moe",),
               "q/k norms, sparse expert MLPs (softmax top-k routing, grouped by expert)"),
        Family("mistral", _LLAMA, ("MistralForCausalLM",), (),
               "sliding-window attention"),
        Family("phi3", "workers.model.phi3:Phi3ForCausalLM", ("Phi3ForCausalLM",), ("phi3",),
               "fused qkv and gate_up, partial rotary, longrope"),
        Family("gemma3", "workers.model.gemma3:Gemma3ForCausalLM",
               ("Gemma3ForCausalLM",), ("gemma3",),
               "local/global layers, q/k norms, (1+w) norms, GELU, scaled embeddings"),
        Family("smollm3", "workers.model.smollm3:SmolLM3ForCausalLM",
               ("SmolLM3ForCausalLM",), ("smollm3",), "layers without rope"),
        Family("granite", "workers.model.granite:GraniteForCausalLM",
               ("GraniteForCausalLM",), ("granite",),
               "embedding, residual, attention and logits multipliers"),
    )
}
ARCHITECTURES = tuple(FAMILIES)
HF_ARCHITECTURES = {hf: family.name for family in FAMILIES.values() for hf in family.hf_architectures}
GGUF_ARCHITECTURES = {
    gguf: family.name for family in FAMILIES.values() for gguf in family.gguf_architectures
}


def model_class(architecture: str) -> type[CausalLM]:
    """The model class of a family (imports torch and the model's module)."""
    family = FAMILIES.get(architecture)
    if family is None:
        raise ValueError(f"unsupported architecture {architecture!r}; supported: {ARCHITECTURES}")
    module, _, name = family.model.partition(":")
    cls: type[CausalLM] = getattr(import_module(module), name)
    return cls
