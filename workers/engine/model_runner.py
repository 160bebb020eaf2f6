"""Owns the model and its paged KV cache: turns a batch of sequences into one forward pass
(batched prefill or batched decode) and samples each sequence's next token."""

from __future__ import annotations

import torch

import kernels
from workers.engine.config import EngineConfig
from workers.engine.sampler import Sampler, SamplerOutput
from workers.engine.sequence import Sequence
from workers.model.attention import AttentionMetadata, allocate_kv_cache, kv_cache_bytes_per_block
from workers.model.host import available_host_memory, usable_cpu_count
from workers.model.loader import LoadedModel
from workers.model.quantized_linear import only_group_linears, rows_invariant_linears

KV_CACHE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        self.model = loaded.model
        self.model_config = loaded.config
        self.block_size = config.block_size
        first_weight = next(self.model.parameters())
        self.device = first_weight.device
        self.dtype = first_weight.dtype
        self.prefill_threads = self.decode_threads = 0
        if self.device.type == "cpu":
            self.prefill_threads = usable_cpu_count()
            self.decode_threads = config.num_threads or self.prefill_threads
            torch.set_num_threads(self.decode_threads)
        self.ops = self._use_backend(config.kernels)
        # Whether a row's bits are the same at any thread count, so that decode steps may
        # change it with their width: the fused ops, and every linear on the fused
        # quantized op (tests/workers/model/test_quantized_linear.py, tests/kernels/test_cpu_ops.py).
        self.thread_invariant = self.ops.backend == "cpu" and only_group_linears(self.model)
        self.wide_decode_rows = config.wide_decode_rows if self.thread_invariant else None
        # Whether a token computed in a prefill gets the bits of a decode step, so that
        # drafts verified in one pass give what decoding them one by one would.
        self.prefill_rows_exact = self.device.type == "cpu" and rows_invariant_linears(self.model)
        kv_dtype = self.dtype if config.dtype == "auto" else KV_CACHE_DTYPES[config.dtype]
        if kv_dtype != self.dtype:
            # The attention ops read queries and cached keys in one dtype.
            raise ValueError(
                f"KV cache dtype {config.dtype} differs from the model's {self.dtype}; "
                "load the model in the dtype the cache should have"
            )
        self.num_kv_blocks = config.num_kv_blocks or self._num_blocks_from_memory(config, kv_dtype)
        self.kv_caches = allocate_kv_cache(
            self.model_config, self.num_kv_blocks, self.block_size, self.device, kv_dtype
        )
        self.sampler = Sampler(
            self.ops, self.model_config.vocab_size, self.device, loaded.tokenizer.eos_token_ids
        )

    def threads_for(self, is_prefill: bool, rows: int) -> int:
        """CPU threads of a step (0 on a GPU) that computes `rows` tokens. Where the model
        is thread-invariant, every core from `wide_decode_rows` rows on, prefill or
        decode, and the decode threads below (a prefill of a token or two past a cached
        prefix is a decode step's work); elsewhere every core for prefill only."""
        if self.wide_decode_rows is not None:
            wide = rows >= self.wide_decode_rows
            return self.prefill_threads if wide else self.decode_threads
        return self.prefill_threads if is_prefill else self.decode_threads

    def _use_backend(self, requested: str) -> kernels.KernelOps:
        """The model was built with the ops of some backend; if the engine is configured
        for another, every module's ops are switched to it."""
        if requested == "auto":
            # Triton runs only on CUDA tensors, whatever else the machine has.
            backend = (
                kernels.resolve_backend("auto")
                if self.device.type == "cuda"
                else kernels.cpu_backend()
            )
        else:
            backend = kernels.resolve_backend(requested)
        ops = kernels.get_ops(backend)
        if getattr(self.model.ops, "backend", None) != backend:
            for module in self.model.modules():
                if hasattr(module, "ops"):
                    setattr(module, "ops", ops)  # noqa: B010 (nn.Module types its attributes as tensors)
        return ops

    def _num_blocks_from_memory(self, config: EngineConfig, kv_dtype: torch.dtype) -> int:
        if self.device.type == "cuda":
            free_bytes, _ = torch.cuda.mem_get_info(self.device)
        else:
            free_bytes = available_host_memory()
        bytes_per_block = kv_cache_bytes_per_block(self.model_config, self.block_size, kv_dtype)
        num_blocks = int(free_bytes * config.kv_cache_memory_fraction) // bytes_per_block
        if num_blocks < 1:
            raise ValueError(
                f"{config.kv_cache_memory_fraction:.0%} of {free_bytes} free bytes holds no KV "
                f"block of {bytes_per_block} bytes; raise kv_cache_memory_fraction or set num_kv_blocks"
            )
        return num_blocks

    @torch.inference_mode()
    def run(
        self, seqs: list[Sequence], is_prefill: bool, forced_token_ids: list[int | None]
    ) -> SamplerOutput:
        rows = len(seqs)
        if is_prefill:
            rows = sum(seq.num_tokens - seq.num_cached_tokens for seq in seqs)
        threads = self.threads_for(is_prefill, rows)
        if threads and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        last_token_rows: torch.Tensor | None = None
        if is_prefill:
            self._copy_lent_tokens(seqs)
            input_ids, positions, attn, last_token_rows = self._prepare_prefill(seqs)
        else:
            input_ids, positions, attn = self._prepare_decode(seqs)
        hidden = self.model(input_ids, positions, attn, self.kv_caches)
        if last_token_rows is not None:
            hidden = hidden[last_token_rows]
        logits = self.model.compute_logits(hidden)
        return self.sampler(logits, seqs, forced_token_ids)

    @torch.inference_mode()
    def score(self, seqs: list[Sequence], drafts: list[list[int]]) -> torch.Tensor:
        """Logits [sum of (1 + draft length), V] fp32 of each sequence's last token and then
        its draft's tokens, at the positions they would take: one forward pass, a prefill
        of a few tokens past the cache. A decode step's work, so it keeps a decode step's
        threads; the slots past the last token come from BlockManager.reserve_slots."""
        block_size = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        cu_seqlens_q = [0]
        context_lens: list[int] = []
        for seq, draft in zip(seqs, drafts, strict=True):
            start = seq.num_tokens - 1
            input_ids.append(seq.token_ids[-1])
            input_ids.extend(draft)
            for position in range(start, start + 1 + len(draft)):
                positions.append(position)
                slot_mapping.append(
                    seq.block_table[position // block_size] * block_size + position % block_size
                )
            cu_seqlens_q.append(len(input_ids))
            context_lens.append(seq.num_tokens + len(draft))
        threads = self.threads_for(False, len(input_ids))
        if threads and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        device = self.device
        attn = AttentionMetadata(
            is_prefill=True,
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_tables=self._block_tables(seqs),
            context_lens=torch.tensor(context_lens, dtype=torch.int32, device=device),
            cu_seqlens_q=torch.tensor(cu_seqlens_q, dtype=torch.int32, device=device),
        )
        hidden = self.model(
            torch.tensor(input_ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device),
            attn,
            self.kv_caches,
        )
        return self.model.compute_logits(hidden)

    def _copy_lent_tokens(self, seqs: list[Sequence]) -> None:
        """Copies each cached block that lends a sequence its first tokens into the
        sequence's own block, every layer, ahead of the forward pass that fills the rest.
        One gather then one scatter per cache, so no copy reads what another writes."""
        copies = [seq.kv_copy for seq in seqs if seq.kv_copy is not None]
        if not copies:
            return
        sources = torch.tensor([source for source, _ in copies], device=self.device)
        destinations = torch.tensor([destination for _, destination in copies], device=self.device)
        for k_cache, v_cache in self.kv_caches:
            k_cache[destinations] = k_cache[sources]
            v_cache[destinations] = v_cache[sources]
        for seq in seqs:
            seq.kv_copy = None

    def _prepare_prefill(
        self, seqs: list[Sequence]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """Every sequence contributes the tokens past its cached prefix; the prefix's keys and
        values are read from the cache by the attention op."""
        block_size = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        cu_seqlens_q = [0]
        for seq in seqs:
            start = seq.num_cached_tokens
            input_ids.extend(seq.token_ids[start:])
            positions.extend(range(start, seq.num_tokens))
            block_table = seq.block_table
            for position in range(start, seq.num_tokens):
                slot_mapping.append(
                    block_table[position // block_size] * block_size + position % block_size
                )
            cu_seqlens_q.append(len(input_ids))
        device = self.device
        attn = AttentionMetadata(
            is_prefill=True,
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_tables=self._block_tables(seqs),
            context_lens=torch.tensor(
                [seq.num_tokens for seq in seqs], dtype=torch.int32, device=device
            ),
            cu_seqlens_q=torch.tensor(cu_seqlens_q, dtype=torch.int32, device=device),
        )
        last_token_rows = torch.tensor(
            [end - 1 for end in cu_seqlens_q[1:]], dtype=torch.int64, device=device
        )
        return (
            torch.tensor(input_ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device),
            attn,
            last_token_rows,
        )

    def _prepare_decode(
        self, seqs: list[Sequence]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """One token per sequence: the last one, whose key and value are not cached yet."""
        block_size = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        for seq in seqs:
            position = seq.num_tokens - 1
            input_ids.append(seq.token_ids[-1])
            positions.append(position)
            slot_mapping.append(
                seq.block_table[position // block_size] * block_size + position % block_size
            )
        device = self.device
        attn = AttentionMetadata(
            is_prefill=False,
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_tables=self._block_tables(seqs),
            context_lens=torch.tensor(
                [seq.num_tokens for seq in seqs], dtype=torch.int32, device=device
            ),
        )
        return (
            torch.tensor(input_ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device),
            attn,
        )

    def _block_tables(self, seqs: list[Sequence]) -> torch.Tensor:
        # Rows are padded with block 0: the ops never read past a sequence's context.
        width = max(len(seq.block_table) for seq in seqs)
        rows = [seq.block_table + [0] * (width - len(seq.block_table)) for seq in seqs]
        return torch.tensor(rows, dtype=torch.int32, device=self.device)
