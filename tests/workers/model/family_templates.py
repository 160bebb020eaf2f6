"""The real chat templates of the served families (llama.cpp's vendored copies), with the
special tokens each model's tokenizer defines, and transformers' rendering of them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from tests.llama_cpp_source import llama_cpp_tree, template

R1_BOS, R1_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


@dataclass(frozen=True)
class FamilyTemplate:
    family: str
    name: str  # the file stem under llama.cpp's models/templates/
    bos_token: str | None
    eos_token: str

    @property
    def source(self) -> str:
        return template(llama_cpp_tree(), self.name)


FAMILY_TEMPLATES = [
    FamilyTemplate("qwen2", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", R1_BOS, R1_EOS),
    FamilyTemplate("qwen2", "Qwen-QwQ-32B", None, "<|im_end|>"),
    FamilyTemplate("qwen2", "Qwen-Qwen2.5-7B-Instruct", None, "<|im_end|>"),
    FamilyTemplate("llama", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", R1_BOS, R1_EOS),
    FamilyTemplate("llama", "meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    FamilyTemplate("llama", "meta-llama-Llama-3.2-3B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    FamilyTemplate("llama", "meta-llama-Llama-3.3-70B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    FamilyTemplate("qwen3", "Qwen-Qwen3-0.6B", None, "<|im_end|>"),
    FamilyTemplate("mistral", "Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>"),
    FamilyTemplate("mistral", "mistralai-Ministral-3-14B-Reasoning-2512", "<s>", "</s>"),
    FamilyTemplate("mistral", "mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>"),
    FamilyTemplate("phi3", "microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>"),
    FamilyTemplate("gemma", "google-gemma-2-2b-it", "<bos>", "<eos>"),
    FamilyTemplate("smollm3", "HuggingFaceTB-SmolLM3-3B", None, "<|im_end|>"),
    FamilyTemplate("granite", "ibm-granite-granite-3.3-2B-Instruct", "<|end_of_text|>",
                   "<|end_of_text|>"),
]


@cache
def _hf_tokenizer(source: str, bos_token: str | None, eos_token: str) -> Any:
    """A transformers tokenizer that carries the template and the special tokens: the
    rendering needs nothing of its vocabulary."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [token for token in (bos_token, eos_token) if token]
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {token: index for index, token in enumerate(dict.fromkeys([*specials, "<unk>"]))},
        unk_token="<unk>",
    ))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=bos_token, eos_token=eos_token,
        chat_template=source,
    )


def transformers_render(
    family: FamilyTemplate, messages: list[dict[str, Any]], **kwargs: Any
) -> str:
    tokenizer = _hf_tokenizer(family.source, family.bos_token, family.eos_token)
    rendered: str = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    return rendered
