"""PagedRunner: drives a CausalLM over a block pool the way an engine does, for the tests."""

from __future__ import annotations

import torch

from workers.model import AttentionMetadata, CausalLM, allocate_kv_cache


class PagedRunner:
    """Owns a KV block pool and per-sequence block tables; each call is one model step.

    Blocks are handed out from the top of the pool down, so a sequence's blocks are never
    contiguous or in order: a paging bug cannot hide behind an identity block table.
    """

    def __init__(self, model: CausalLM, block_size: int, num_blocks: int):
        self.model = model
        self.block_size = block_size
        dtype = model.embed_tokens.weight.dtype
        device = model.embed_tokens.weight.device
        self.kv_caches = allocate_kv_cache(model.config, num_blocks, block_size, device, dtype)
        self.free_blocks = list(range(num_blocks))
        self.block_tables: dict[str, list[int]] = {}
        self.lengths: dict[str, int] = {}

    def _grow(self, seq: str, new_tokens: int) -> list[int]:
        """Reserve blocks for `new_tokens` more tokens; return their slots."""
        table = self.block_tables.setdefault(seq, [])
        start = self.lengths.get(seq, 0)
        end = start + new_tokens
        while len(table) * self.block_size < end:
            table.append(self.free_blocks.pop())
        self.lengths[seq] = end
        return [
            table[p // self.block_size] * self.block_size + p % self.block_size
            for p in range(start, end)
        ]

    def step(
        self, chunks: dict[str, list[int]], is_prefill: bool, every_position: bool = False
    ) -> dict[str, torch.Tensor]:
        """Run one step over `chunks` (sequence -> new token ids).

        Returns each sequence's last-token logits [V], or with `every_position` the logits
        of all its new tokens [q_len, V].
        """
        ids, positions, slots, q_lens = [], [], [], []
        for seq, tokens in chunks.items():
            start = self.lengths.get(seq, 0)
            ids += tokens
            positions += range(start, start + len(tokens))
            slots += self._grow(seq, len(tokens))
            q_lens.append(len(tokens))
        if not is_prefill and any(n != 1 for n in q_lens):
            raise ValueError("a decode step takes exactly one token per sequence")
        width = max(len(self.block_tables[seq]) for seq in chunks)
        tables = [
            self.block_tables[seq] + [0] * (width - len(self.block_tables[seq])) for seq in chunks
        ]
        cu_seqlens = [0]
        for n in q_lens:
            cu_seqlens.append(cu_seqlens[-1] + n)
        attn = AttentionMetadata(
            is_prefill=is_prefill,
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            block_tables=torch.tensor(tables, dtype=torch.int32),
            context_lens=torch.tensor([self.lengths[seq] for seq in chunks], dtype=torch.int32),
            cu_seqlens_q=torch.tensor(cu_seqlens, dtype=torch.int32),
        )
        with torch.inference_mode():
            hidden = self.model(
                torch.tensor(ids, dtype=torch.int64),
                torch.tensor(positions, dtype=torch.int64),
                attn,
                self.kv_caches,
            )
            if every_position:
                logits = self.model.compute_logits(hidden)
                return {
                    seq: logits[cu_seqlens[row] : cu_seqlens[row + 1]]
                    for row, seq in enumerate(chunks)
                }
            last_rows = torch.tensor(cu_seqlens[1:]) - 1
            logits = self.model.compute_logits(hidden[last_rows])
        return {seq: logits[row] for row, seq in enumerate(chunks)}

    def greedy(
        self, seq: str, prompt_ids: list[int], max_new_tokens: int, stop_ids: tuple[int, ...]
    ) -> list[int]:
        """Greedy decoding of one sequence: a prefill, then one decode step per token."""
        logits = self.step({seq: prompt_ids}, is_prefill=True)[seq]
        output: list[int] = []
        while len(output) < max_new_tokens:
            token = int(logits.argmax())
            if token in stop_ids:
                break
            output.append(token)
            logits = self.step({seq: [token]}, is_prefill=False)[seq]
        return output
