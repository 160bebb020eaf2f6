"""Writes tiny random Llama and Qwen3 checkpoints in Hugging Face layout, tokenizer included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]
CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "def add(a, b):\n    return a + b\n",
    "Emoji 🤗 and accents: café, naïve, Zürich. 日本語のテキスト。",
    "Numbers 12345 and 67890, plus symbols !@#$%^&*().",
] * 4

QWEN3_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' + tools | tojson + "
    "'\\nCall one as <tool_call>{...}</tool_call><|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}\n"
)


def build_tokenizer(with_think_tokens: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if with_think_tokens:
        # As in Qwen3: added, matched whole, but not special (they are kept in decoded text).
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tokenizer


def tiny_config(architecture: str, vocab_size: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 128,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "float32",
    }
    if architecture == "qwen3":
        # head_dim deliberately not hidden_size / heads, as in real Qwen3 checkpoints.
        config.update(
            architectures=["Qwen3ForCausalLM"],
            model_type="qwen3",
            head_dim=24,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            attention_bias=False,
        )
    else:
        config.update(
            architectures=["LlamaForCausalLM"],
            model_type="llama",
            rope_theta=500000.0,
            tie_word_embeddings=False,
            attention_bias=True,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    return config


def random_state_dict(config: dict[str, Any], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.15) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * std

    def norm_weight(size: int) -> torch.Tensor:
        return 1.0 + normal(size, std=0.1)

    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    bias = config["attention_bias"]
    state = {
        "model.embed_tokens.weight": normal(config["vocab_size"], hidden, std=0.5),
        "model.norm.weight": norm_weight(hidden),
    }
    if not config["tie_word_embeddings"]:
        state["lm_head.weight"] = normal(config["vocab_size"], hidden)
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        shapes = {
            "q_proj": heads * head_dim,
            "k_proj": kv_heads * head_dim,
            "v_proj": kv_heads * head_dim,
        }
        for name, rows in shapes.items():
            state[f"{prefix}self_attn.{name}.weight"] = normal(rows, hidden)
            if bias:
                state[f"{prefix}self_attn.{name}.bias"] = normal(rows)
        state[f"{prefix}self_attn.o_proj.weight"] = normal(hidden, heads * head_dim)
        if bias:
            state[f"{prefix}self_attn.o_proj.bias"] = normal(hidden)
        if config["model_type"] == "qwen3":
            state[f"{prefix}self_attn.q_norm.weight"] = norm_weight(head_dim)
            state[f"{prefix}self_attn.k_norm.weight"] = norm_weight(head_dim)
        state[f"{prefix}mlp.gate_proj.weight"] = normal(inter, hidden)
        state[f"{prefix}mlp.up_proj.weight"] = normal(inter, hidden)
        state[f"{prefix}mlp.down_proj.weight"] = normal(hidden, inter)
        state[f"{prefix}input_layernorm.weight"] = norm_weight(hidden)
        state[f"{prefix}post_attention_layernorm.weight"] = norm_weight(hidden)
    return state


def write_tiny_checkpoint(
    directory: Path, architecture: str, seed: int = 0, **config_overrides: Any
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Write config.json, model.safetensors, tokenizer.json and the template; return (config, state)."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(with_think_tokens=architecture == "qwen3")
    # The model's vocabulary is padded past the tokenizer's, as real checkpoints often are.
    config = tiny_config(architecture, tokenizer.get_vocab_size() + 7)
    config.update(config_overrides)
    state = random_state_dict(config, seed)
    save_file(state, str(directory / "model.safetensors"))
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer_config = {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}
    if architecture == "qwen3":
        tokenizer_config["chat_template"] = QWEN3_TEMPLATE
    else:
        (directory / "chat_template.jinja").write_text(LLAMA_TEMPLATE)
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    return config, state
