"""Hugging Face directories: config parsing, tokenizer files, template sources and bad input."""

from __future__ import annotations

import json

import pytest

from harness.tiny_checkpoint import QWEN3_TEMPLATE, write_tiny_checkpoint
from workers.model import load_model
from workers.model.hf_loader import read_hf_config

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def test_config_defaults_and_newer_rope_parameters():
    config = read_hf_config(
        {
            **BASE,
            "eos_token_id": [5, 6],
            "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"},
        }
    )
    assert (config.architecture, config.num_kv_heads, config.head_dim) == ("llama", 4, 16)
    assert config.rope_theta == 5e5 and config.rope_scaling is None
    assert config.eos_token_ids == (5, 6) and not config.tie_word_embeddings


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "unsupported architectures"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"num_attention_heads": 3, "num_key_value_heads": 2}, "multiple"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}, None),
    ],
)
def test_config_rejections(change, message):
    raw = {**BASE, **change}
    if message is None:
        # Unknown rope scaling is caught when the rope table is built.
        from workers.model.rope import inverse_frequencies

        with pytest.raises(ValueError, match="dynamic"):
            inverse_frequencies(read_hf_config(raw))
        return
    with pytest.raises(ValueError, match=message):
        read_hf_config(raw)


def test_tiny_qwen3_directory(tiny_qwen3):
    loaded = tiny_qwen3.loaded
    assert loaded.config.architecture == "qwen3" and loaded.config.head_dim == 24
    assert loaded.config.tie_word_embeddings and loaded.model.lm_head is None
    assert loaded.chat_template.source == QWEN3_TEMPLATE
    tokenizer = loaded.tokenizer
    # The template closes turns with <|im_end|>, so the engine must stop on it too.
    assert tokenizer.token_to_id("<|im_end|>") in tokenizer.eos_token_ids
    assert tokenizer.token_to_id("<|endoftext|>") in tokenizer.eos_token_ids
    assert tokenizer.encode("<think>") == [tokenizer.token_to_id("<think>")]
    assert loaded.config.vocab_size > tokenizer.vocab_size


def test_tiny_llama_directory_uses_chat_template_jinja(tiny_llama):
    loaded = tiny_llama.loaded
    assert loaded.config.attention_bias and not loaded.config.tie_word_embeddings
    assert loaded.config.rope_scaling["rope_type"] == "llama3"
    rendered = loaded.chat_template.render([{"role": "user", "content": "hi"}])
    assert rendered == "<|endoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_missing_files_and_tensors_are_clear_errors(tmp_path):
    directory = tmp_path / "m"
    write_tiny_checkpoint(directory, "qwen3")
    (directory / "tokenizer.json").rename(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match="no tokenizer.json"):
        load_model(directory)
    (tmp_path / "tokenizer.json").rename(directory / "tokenizer.json")

    # A checkpoint lacking a layer's tensors must not load with garbage in their place.
    config = json.loads((directory / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="missing"):
        load_model(directory)

    (directory / "config.json").unlink()
    with pytest.raises(ValueError, match="no config.json"):
        load_model(directory)
