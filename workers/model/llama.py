"""CausalLM: the Llama decoder over the paged KV cache and `kernels` ops, and the shared
layers the other families' model files (families.py) build on. Llama, Qwen2 (q/k/v bias),
Qwen3 (q/k norms) and Mistral (a sliding window) are this model with their config."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from kernels import KernelOps
from workers.model.attention import Attention, AttentionMetadata, KVCache
from workers.model.config import ModelConfig
from workers.model.fused_layers import FusedLayers
from workers.model.rope import build_cos_sin_cache
from workers.model.weights import WeightLoader


class RMSNorm(nn.Module):
    """Holds the weight; the arithmetic (optionally fused with the residual add) is ops.rms_norm."""

    def __init__(self, size: int, eps: float, ops: KernelOps, dtype: torch.dtype | None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype))
        self.eps = eps
        self.ops = ops

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # out alone, or (out, residual) when a residual is fused in, as ops.rms_norm returns.
        return self.ops.rms_norm(x, self.weight, self.eps, residual)


class SelfAttention(nn.Module):
    """Projections, optional per-head q/k norm (Qwen3, Gemma 3), rope, then paged attention
    (over the layer's sliding window where its config gives it one)."""

    def __init__(
        self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None, layer: int = 0
    ):
        super().__init__()
        self.config = config
        self.ops = ops
        # One matmul for q, k and v: a single GEMM beats three small ones, most of all in decode.
        self.qkv_proj = nn.Linear(
            config.hidden_size,
            config.q_size + 2 * config.kv_size,
            bias=config.attention_bias or config.qkv_bias,
            dtype=dtype,
        )
        self.o_proj = nn.Linear(
            config.q_size, config.hidden_size, bias=config.attention_bias, dtype=dtype
        )
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.uses_qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps, ops, dtype)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps, ops, dtype)
        self.attn = Attention(
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
            ops,
            scale=config.attention_scale,
            sliding_window=config.layer_window(layer),
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> torch.Tensor:
        config = self.config
        tokens = hidden.shape[0]
        qkv = self.qkv_proj(hidden)
        q, k, v = qkv.split([config.q_size, config.kv_size, config.kv_size], dim=-1)
        head_dim = config.head_dim
        if self.q_norm is not None and self.k_norm is not None:
            # The norm runs over each head's D values, so heads become rows.
            q = self.q_norm(q.reshape(-1, head_dim))
            k = self.k_norm(k.reshape(-1, head_dim))
        # Contiguous copies: rope rotates in place and the kernels want dense heads.
        q = q.reshape(tokens, config.num_heads, head_dim).contiguous()
        k = k.reshape(tokens, config.num_kv_heads, head_dim).contiguous()
        v = v.reshape(tokens, config.num_kv_heads, head_dim).contiguous()
        self.rotate(q, k, positions, cos_sin_cache)
        return self.o_proj(self.attn(q, k, v, kv_cache, attn))

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> None:
        """Rope on q and k in place (a family without it on some layers overrides this)."""
        self.ops.rotary_embedding(q, k, positions, cos_sin_cache)


class MLP(nn.Module):
    """SwiGLU with gate and up fused into one matmul."""

    def __init__(self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None):
        super().__init__()
        self.ops = ops
        self.gate_up_proj = nn.Linear(
            config.hidden_size, 2 * config.intermediate_size, bias=False, dtype=dtype
        )
        self.down_proj = nn.Linear(
            config.intermediate_size, config.hidden_size, bias=False, dtype=dtype
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(hidden)))


class DecoderLayer(nn.Module):
    attention_class: type[SelfAttention] = SelfAttention

    def __init__(
        self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None, layer: int = 0
    ):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops, dtype)
        self.self_attn = self.attention_class(config, ops, dtype, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops, dtype)
        self.mlp = MLP(config, ops, dtype)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, residual = self.enter(hidden, residual)
        hidden = self.self_attn(positions, hidden, attn, kv_cache, cos_sin_cache)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual

    def enter(
        self, hidden: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The input norm, with the previous layer's output added to the residual stream.
        The stream is carried separately so each norm can fuse the add into itself, and in
        fp32 whatever the model dtype: summed over 2 * layers additions in bf16 it loses
        enough to change a small model's answers (the matmuls stay in model dtype)."""
        if residual is None:
            residual = hidden.float()
            return self.input_layernorm(hidden), residual
        normed, residual = self.input_layernorm(hidden, residual)
        return normed, residual


class CausalLM(nn.Module):
    """Token ids in, final-norm hidden states out; `compute_logits` maps chosen rows to fp32 logits.

    Build it under `torch.device("meta")` and fill it with `load_weights` to skip the cost of
    random initialization; `load_model` does exactly that. A family's model file subclasses
    it, changing `layer_class` and the hooks below.
    """

    layer_class: type[DecoderLayer] = DecoderLayer

    def __init__(self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None = None):
        super().__init__()
        self.config = config
        self.ops = ops
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(
            self.layer_class(config, ops, dtype, layer) for layer in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops, dtype)
        self.lm_head: nn.Module | None = None
        # A prepacked copy of the tied embedding for the CPU path (see cpu_linear.py).
        self.tied_lm_head: nn.Module | None = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, dtype=dtype)
        # Whether the layers may run as one fused CPU op where it covers the model
        # (workers/model/fused_layers.py); False runs the modules one op at a time.
        self.fuse_layers = True
        cache_dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.register_buffer(
            "cos_sin_cache",
            build_cos_sin_cache(config, self.embed_tokens.weight.device, cache_dtype),
            persistent=False,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn: AttentionMetadata,
        kv_caches: list[KVCache],
    ) -> torch.Tensor:
        """input_ids [T], positions [T] int64 -> hidden [T, H] after the final norm."""
        if len(kv_caches) != self.config.num_layers:
            raise ValueError(
                f"expected {self.config.num_layers} (k_cache, v_cache) pairs, got {len(kv_caches)}"
            )
        if input_ids.dim() != 1 or positions.shape != input_ids.shape:
            raise ValueError(
                f"input_ids and positions must both be [T], got {tuple(input_ids.shape)} "
                f"and {tuple(positions.shape)}"
            )
        hidden = self.embed(input_ids)
        fused = self._fused_layers()
        if fused is not None:
            hidden, residual = fused(hidden, positions, attn, kv_caches, self.cos_sin_cache)
        else:
            residual = None
            for index, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches, strict=True)):
                hidden, residual = layer(
                    positions, hidden, residual, attn, kv_cache, self.layer_rope(index)
                )
        hidden, _ = self.norm(hidden, residual)
        return hidden

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def layer_rope(self, layer: int) -> torch.Tensor:
        """The cos/sin table a layer rotates by."""
        return self.cos_sin_cache

    def fusable(self) -> bool:
        """Whether the fused CPU decoder stack (fused_layers.py) computes what the modules
        do: Llama's layers without bias, q/k norms, windows or per-layer rope."""
        config = self.config
        return type(self).layer_class is DecoderLayer and not (
            config.attention_bias or config.qkv_bias or config.uses_qk_norm
            or config.sliding_window is not None or config.rope_layers
            or config.attention_scale is not None
        )

    def checkpoint_rows(self, name: str) -> torch.Tensor | None:
        """A row order to apply to checkpoint tensor `name` (Hugging Face named) as it is
        loaded, dense or quantized alike; None to take it as stored."""
        return None

    def _fused_layers(self) -> FusedLayers | None:
        """The one-call layer stack, where the fused CPU ops serve this model and cover it
        (the ops may change, so they are asked every time)."""
        if not self.fuse_layers or getattr(self.ops, "backend", None) != "cpu":
            return None
        return self._fused

    @functools.cached_property
    def _fused(self) -> FusedLayers | None:
        # Looked up at the first forward pass, after loading: the linears do not change.
        return FusedLayers.of(self)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> logits [N, V] in fp32, whatever the model dtype."""
        if self.lm_head is not None:
            return self.lm_head(hidden).float()
        if self.tied_lm_head is not None:
            return self.tied_lm_head(hidden).float()
        return F.linear(hidden, self.embed_tokens.weight).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face named tensors in, fusing q/k/v and gate/up; all must be present."""
        WeightLoader(self).load(
            (name, tensor if (rows := self.checkpoint_rows(name)) is None else tensor[rows])
            for name, tensor in weights
        )
        # Materializing from meta leaves buffers uninitialized, and the rope table is not
        # a checkpoint tensor, so it is rebuilt here on the parameters' device.
        self.build_rope_tables()

    def build_rope_tables(self) -> None:
        self.cos_sin_cache = build_cos_sin_cache(
            self.config, self.embed_tokens.weight.device, self.embed_tokens.weight.dtype
        )
