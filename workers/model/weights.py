"""WeightLoader: copies Hugging Face named tensors into a CausalLM, fusing q/k/v and gate/up
rows, and stacking a mixture-of-experts layer's experts (one tensor per expert in a Hugging
Face folder, all experts in one 3-D tensor in a GGUF file) into `mlp.experts`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from workers.model.llama import CausalLM

# Checkpoint projection -> (fused parameter, shard index inside it).
FUSED_PROJECTIONS = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
# An expert's projection -> (the stacked parameter of all experts, shard index inside it).
EXPERT_PROJECTIONS = {
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "down_proj": ("down_proj", 0),
}
# Tensors some checkpoints carry that the forward pass does not read.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class WeightLoader:
    """Tracks which parameter rows were filled, so a partial checkpoint is an error, not noise."""

    def __init__(self, model: CausalLM):
        config = model.config
        self.model = model
        self.params = dict(model.named_parameters())
        self.shard_rows = {
            "qkv_proj": (config.q_size, config.kv_size, config.kv_size),
            "gate_up_proj": (config.intermediate_size, config.intermediate_size),
        }
        self.filled: set[tuple[str, int]] = set()
        # Stacked expert parameters are filled per (expert, shard): shard e * 2 + s.
        self.moe_width = config.moe_intermediate_size
        self.expert_shards = {"gate_up_proj": 2 * config.num_experts, "down_proj": config.num_experts}

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        tied = self.model.config.tie_word_embeddings
        for name, tensor in weights:
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            if name == "lm_head.weight" and tied:
                # Tied checkpoints sometimes store the copy anyway; the embedding is used.
                continue
            self._load_one(name.removeprefix("model."), tensor)
        self._check_complete()

    def _load_one(self, name: str, tensor: torch.Tensor) -> None:
        parts = name.split(".")
        if "experts" in parts[:-2]:
            self._load_experts(name, parts, tensor)
            return
        fused = FUSED_PROJECTIONS.get(parts[-2]) if len(parts) >= 2 else None
        if fused is None:
            self._copy(name, name, 0, (), tensor)
            if len(parts) >= 2 and parts[-2] in self.shard_rows:
                # Stored fused already (Phi-3's qkv_proj and gate_up_proj): every shard is in.
                self.filled.update((name, shard) for shard in range(len(self.shard_rows[parts[-2]])))
            return
        fused_name, shard = fused
        target = ".".join(parts[:-2] + [fused_name, parts[-1]])
        rows = self.shard_rows[fused_name]
        start = sum(rows[:shard])
        self._copy(name, target, shard, (slice(start, start + rows[shard]),), tensor)

    def _load_experts(self, name: str, parts: list[str], tensor: torch.Tensor) -> None:
        """`...experts.E.gate_proj.weight` (one expert) or `...experts.gate_proj.weight`
        (all of them, [E, rows, columns])."""
        position = parts.index("experts")
        projection = parts[-2]
        if projection not in EXPERT_PROJECTIONS or position not in (len(parts) - 3, len(parts) - 4):
            raise ValueError(f"checkpoint tensor {name!r} has no place in the model")
        stacked, shard = EXPERT_PROJECTIONS[projection]
        target = ".".join(parts[: position + 1] + [stacked])
        width = self.moe_width
        rows = slice(None) if stacked == "down_proj" else slice(shard * width, (shard + 1) * width)
        shards = 2 if stacked == "gate_up_proj" else 1
        if position == len(parts) - 4:
            expert = int(parts[position + 1])
            self._copy(name, target, expert * shards + shard, (expert, rows), tensor)
            return
        self._copy(name, target, shard, (slice(None), rows), tensor)
        # One tensor of all experts stands for each expert's shard.
        count = self.expert_shards[stacked] // shards
        self.filled.update((target, expert * shards + shard) for expert in range(1, count))

    def _copy(
        self,
        source: str,
        target: str,
        shard: int,
        index: tuple[int | slice, ...],
        tensor: torch.Tensor,
    ) -> None:
        """Copy `tensor` into param.data[index] of `target`, marking `shard` filled."""
        param = self.params.get(target)
        if param is None:
            raise ValueError(f"checkpoint tensor {source!r} has no place in the model")
        destination = param.data[index]
        if tuple(destination.shape) != tuple(tensor.shape):
            raise ValueError(
                f"checkpoint tensor {source!r} has shape {tuple(tensor.shape)}, "
                f"the model expects {tuple(destination.shape)}"
            )
        if (target, shard) in self.filled:
            raise ValueError(f"checkpoint tensor {source!r} appears twice")
        destination.copy_(tensor)
        self.filled.add((target, shard))

    def _check_complete(self) -> None:
        missing = []
        for name in self.params:
            fused = name.split(".")[-2] if "." in name else ""
            shards = len(self.shard_rows.get(fused, (None,)))
            if fused == "experts":
                shards = self.expert_shards[name.rpartition(".")[2]]
            missing += [name for shard in range(shards) if (name, shard) not in self.filled]
        if missing:
            shown = ", ".join(sorted(set(missing))[:8])
            raise ValueError(f"checkpoint is missing {len(set(missing))} tensors, e.g. {shown}")
