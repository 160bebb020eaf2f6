"""GGUF loading: the default SmolLM2 file end to end, and a tiny GGUF written from an HF checkpoint."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch

from harness.tiny_checkpoint import LLAMA_TEMPLATE, write_tiny_checkpoint
from workers.model import load_model
from workers.model.gguf_loader import unpermute_rope_rows

from .paged_runner import PagedRunner


def llama_cpp_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to q/k rows of llama models."""
    rows = weight.shape[0]
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def test_smollm2_config(smollm2):
    config = smollm2.config
    assert (config.architecture, config.num_layers, config.hidden_size) == ("llama", 30, 576)
    assert (config.num_heads, config.num_kv_heads, config.head_dim) == (9, 3, 64)
    assert (config.intermediate_size, config.vocab_size) == (1536, 49152)
    assert config.rope_theta == 100000.0 and config.max_position_embeddings == 8192
    assert config.tie_word_embeddings and smollm2.model.lm_head is None
    assert smollm2.name == "SmolLM2-135M-Instruct"


def test_smollm2_greedy_answer_names_paris(smollm2):
    prompt = smollm2.chat_template.render(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    ids = smollm2.tokenizer.encode(prompt)
    runner = PagedRunner(smollm2.model, block_size=16, num_blocks=8)
    output = runner.greedy("q", ids, max_new_tokens=24, stop_ids=smollm2.tokenizer.eos_token_ids)
    assert "Paris" in smollm2.tokenizer.decode(output)


def test_unpermute_inverts_llama_cpp_permutation():
    weight = torch.randn(3 * 8, 5)
    bias = torch.randn(3 * 8)
    permuted = torch.from_numpy(llama_cpp_permute(weight.numpy(), 3))
    assert not torch.equal(permuted, weight)
    assert torch.equal(unpermute_rope_rows(permuted, 3), weight)
    permuted_bias = torch.from_numpy(llama_cpp_permute(bias.numpy(), 3))
    assert torch.equal(unpermute_rope_rows(permuted_bias, 3), bias)


def _write_gguf(path, config: dict, state: dict[str, torch.Tensor], hf_dir, encode=None) -> None:
    """A float32 llama GGUF with llama.cpp's names, q/k permutation and vocabulary layout;
    `encode(gguf name, float32 values)` -> (bytes, GGML type) or None stores a tensor
    quantized."""
    tokenizer_json = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab = tokenizer_json["model"]["vocab"]
    for added in tokenizer_json["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    specials = {added["content"] for added in tokenizer_json["added_tokens"] if added["special"]}
    padding = [f"[PAD{index}]" for index in range(len(tokens), config["vocab_size"])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer_json["model"]["merges"]]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens + padding)
    writer.add_token_merges(merges)
    writer.add_token_types([3 if t in specials else 1 for t in tokens] + [3] * len(padding))
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_chat_template(LLAMA_TEMPLATE)
    names = {
        "embed_tokens": "token_embd",
        "norm": "output_norm",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "q_proj": "attn_q",
        "k_proj": "attn_k",
        "v_proj": "attn_v",
        "o_proj": "attn_output",
        "gate_proj": "ffn_gate",
        "up_proj": "ffn_up",
        "down_proj": "ffn_down",
    }
    for name, tensor in state.items():
        parts = name.removeprefix("model.").split(".")
        values = tensor.numpy()
        if parts[-2] == "q_proj":
            values = llama_cpp_permute(values, config["num_attention_heads"])
        elif parts[-2] == "k_proj":
            values = llama_cpp_permute(values, config["num_key_value_heads"])
        if parts[0] == "layers":
            gguf_name = f"blk.{parts[1]}.{names[parts[-2]]}.{parts[-1]}"
        elif parts[0] == "lm_head":
            gguf_name = "output.weight"
        else:
            gguf_name = f"{names[parts[0]]}.{parts[-1]}"
        values = np.ascontiguousarray(values, dtype=np.float32)
        encoded = None if encode is None else encode(gguf_name, values)
        if encoded is None:
            writer.add_tensor(gguf_name, values)
        else:
            writer.add_tensor(gguf_name, encoded[0], raw_dtype=encoded[1])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_tiny_gguf_loads_like_its_hf_checkpoint(tmp_path):
    hf_dir = tmp_path / "hf"
    config, state = write_tiny_checkpoint(hf_dir, "llama", seed=3, rope_scaling=None)
    gguf_path = tmp_path / "tiny-llama.gguf"
    _write_gguf(gguf_path, config, state, hf_dir)

    from_gguf, from_hf = load_model(gguf_path), load_model(hf_dir)
    assert from_gguf.name == "tiny-llama"
    assert from_gguf.config.attention_bias and not from_gguf.config.tie_word_embeddings
    text = "The capital of France is Paris 🤗 <|im_end|> 12345"
    assert from_gguf.tokenizer.encode(text) == from_hf.tokenizer.encode(text)
    assert from_gguf.tokenizer.eos_token_ids == from_hf.tokenizer.eos_token_ids
    messages = [{"role": "user", "content": "hi"}]
    prompt = from_gguf.chat_template.render(messages)
    assert prompt == from_hf.chat_template.render(messages)

    ids = from_hf.tokenizer.encode(prompt)
    logits = [
        PagedRunner(loaded.model, block_size=4, num_blocks=8).step({"a": ids}, True)["a"]
        for loaded in (from_gguf, from_hf)
    ]
    assert (logits[0] - logits[1]).abs().max().item() < 1e-5


def test_unsupported_gguf_architecture_is_rejected(tmp_path):
    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="unsupported GGUF architecture 'gpt2'"):
        load_model(path)
