"""Picks each sequence's next token from its logits: penalties, logit bias and forced tokens
(one kernel op), then temperature, top-k, top-p, min-p and a draw; logprobs on request.

Logprobs are the log_softmax of the logits after penalties, bias, forcing and the grammar
mask but before temperature and top-k/top-p/min-p: what the model, as steered by the
request's own penalties and grammar, thinks of each token, independent of how adventurous
the draw is. (vLLM's default, raw_logprobs, reads them before penalties too; this engine
reports the steered distribution so that a forced token reads as certain, which it was.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import KernelOps
from workers.engine.grammar import GrammarMasks, holds_open, picks_next_token
from workers.engine.output_state import TokenLogprob
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import holds_answer_open

LOWEST_LOGPROB = -9999.0


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    # Per sequence; None where the request asked for no logprobs.
    logprobs: list[TokenLogprob | None]


class Sampler:
    def __init__(
        self, ops: KernelOps, vocab_size: int, device: torch.device,
        eos_token_ids: tuple[int, ...] = (),
    ) -> None:
        self.ops = ops
        self.vocab_size = vocab_size
        self.device = device
        self._zero_counts: torch.Tensor | None = None
        self._zero_mask: torch.Tensor | None = None
        self._grammar_masks = GrammarMasks(vocab_size, eos_token_ids)

    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence], forced_token_ids: list[int | None]
    ) -> SamplerOutput:
        """logits [B, V] fp32, one row per sequence; modified in place."""
        if any(forced is not None for forced in forced_token_ids) or any(
            seq.params.has_penalties or seq.params.sampling.logit_bias for seq in seqs
        ):
            self._apply_logits_processors(logits, seqs, forced_token_ids)
        grammar_rows = [
            row for row, (seq, forced) in enumerate(zip(seqs, forced_token_ids, strict=True))
            if picks_next_token(seq, forced)
        ]
        if grammar_rows:
            self._grammar_masks.apply(logits, seqs, grammar_rows)
        open_rows = [
            row for row, (seq, forced) in enumerate(zip(seqs, forced_token_ids, strict=True))
            if holds_open(seq, forced) or holds_answer_open(seq, forced)
        ]
        if open_rows:
            self._grammar_masks.forbid_ending(logits, seqs, open_rows)
        logprob_rows = [row for row, seq in enumerate(seqs) if seq.params.sampling.top_logprobs is not None]
        # Taken before sampling, which rescales and truncates the logits.
        log_probs = logits[logprob_rows].log_softmax(dim=-1) if logprob_rows else None
        sampled_rows = [row for row, seq in enumerate(seqs) if not seq.params.greedy]
        # torch.max's indices are argmax's (the first of equal maxima, NaN first), in a
        # faster kernel: about 1 ms less a step at 32 rows of the default model's vocabulary.
        token_ids = torch.max(logits, dim=-1).indices
        if sampled_rows:
            token_ids[sampled_rows] = self._sample(
                [seqs[row] for row in sampled_rows], logits[sampled_rows]
            )
        logprobs: list[TokenLogprob | None] = [None] * len(seqs)
        if log_probs is not None:
            for index, token_logprob in enumerate(
                self._token_logprobs(log_probs, token_ids[logprob_rows], [seqs[row] for row in logprob_rows])
            ):
                logprobs[logprob_rows[index]] = token_logprob
        return SamplerOutput(token_ids.tolist(), logprobs)

    def _apply_logits_processors(
        self, logits: torch.Tensor, seqs: list[Sequence], forced_token_ids: list[int | None]
    ) -> None:
        batch, vocab_size = logits.shape
        device = logits.device
        if any(seq.params.has_penalties for seq in seqs):
            output_token_counts = torch.zeros((batch, vocab_size), dtype=torch.int32, device=device)
            prompt_token_mask = torch.zeros((batch, vocab_size), dtype=torch.bool, device=device)
        else:
            # Steps that only force think markers (the common case) share read-only zeros.
            output_token_counts, prompt_token_mask = self._empty_history(batch, vocab_size)
        logit_bias = None
        for row, seq in enumerate(seqs):
            sampling = seq.params.sampling
            if seq.params.has_penalties and seq.num_output_tokens:
                output_ids = torch.tensor(seq.output_token_ids, dtype=torch.int64, device=device)
                output_token_counts[row].scatter_add_(
                    0, output_ids, torch.ones_like(output_ids, dtype=torch.int32)
                )
            if sampling.repetition_penalty != 1.0:
                prompt_ids = torch.tensor(seq.prompt_token_ids, dtype=torch.int64, device=device)
                prompt_token_mask[row, prompt_ids] = True
            if sampling.logit_bias:
                if logit_bias is None:
                    logit_bias = torch.zeros((batch, vocab_size), dtype=torch.float32, device=device)
                token_ids = torch.tensor(list(sampling.logit_bias), dtype=torch.int64, device=device)
                biases = torch.tensor(list(sampling.logit_bias.values()), dtype=torch.float32, device=device)
                logit_bias[row, token_ids] = biases
        per_row = torch.tensor(
            [
                [sampling.presence_penalty, sampling.frequency_penalty, sampling.repetition_penalty]
                for sampling in (seq.params.sampling for seq in seqs)
            ],
            dtype=torch.float32,
            device=device,
        )
        forced = torch.tensor(
            # The op's contract marks a free row with -1.
            [-1 if token_id is None else token_id for token_id in forced_token_ids],
            dtype=torch.int64,
            device=device,
        )
        self.ops.apply_logits_processors(
            logits,
            output_token_counts,
            prompt_token_mask,
            per_row[:, 0],
            per_row[:, 1],
            per_row[:, 2],
            logit_bias,
            forced,
        )

    def _empty_history(self, batch: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        counts, mask = self._zero_counts, self._zero_mask
        if counts is None or mask is None or counts.shape[0] < batch:
            counts = torch.zeros((batch, vocab_size), dtype=torch.int32, device=self.device)
            mask = torch.zeros((batch, vocab_size), dtype=torch.bool, device=self.device)
            self._zero_counts, self._zero_mask = counts, mask
        return counts[:batch], mask[:batch]

    @staticmethod
    def _token_logprobs(
        log_probs: torch.Tensor, token_ids: torch.Tensor, seqs: list[Sequence]
    ) -> list[TokenLogprob]:
        # Impossible tokens (-inf) are reported as -9999.0, as OpenAI does, so the numbers
        # stay valid JSON.
        log_probs = log_probs.clamp_(min=LOWEST_LOGPROB)
        sampled = log_probs.gather(1, token_ids[:, None]).squeeze(1).tolist()
        # Only rows that asked for logprobs come here, so every count is set.
        counts = [seq.params.sampling.top_logprobs or 0 for seq in seqs]
        top_values: list[list[float]] = []
        top_ids: list[list[int]] = []
        if max(counts):
            values, ids = log_probs.topk(max(counts), dim=-1)
            top_values, top_ids = values.tolist(), ids.tolist()
        results = []
        for row, count in enumerate(counts):
            top = list(zip(top_ids[row][:count], top_values[row][:count], strict=True)) if count else []
            results.append(TokenLogprob(int(token_ids[row]), sampled[row], top))
        return results

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> torch.Tensor:
        """Exponential race: argmax(p / E) with E ~ Exp(1) per token is a draw from p. Each
        seeded row takes its noise from its own generator, so its tokens depend on its seed
        alone, never on what else shares the batch."""
        temperatures = torch.tensor(
            [seq.params.sampling.temperature for seq in seqs], dtype=torch.float32, device=logits.device
        )
        logits.div_(temperatures[:, None])
        top_k = [seq.params.sampling.top_k for seq in seqs]
        top_p = [seq.params.sampling.top_p for seq in seqs]
        if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
            logits = self._apply_top_k_top_p(logits, top_k, top_p)
        probs = logits.softmax(dim=-1)
        min_p = [seq.params.sampling.min_p for seq in seqs]
        if any(value > 0.0 for value in min_p):
            threshold = torch.tensor(min_p, dtype=torch.float32, device=probs.device)[:, None]
            probs.masked_fill_(probs < threshold * probs.amax(dim=-1, keepdim=True), 0.0)
        noise = torch.empty_like(probs)
        unseeded_rows = [row for row, seq in enumerate(seqs) if seq.params.sampling.seed is None]
        if len(unseeded_rows) == len(seqs):
            noise.uniform_()
        elif unseeded_rows:
            noise[unseeded_rows] = torch.empty(
                (len(unseeded_rows), probs.shape[1]), dtype=probs.dtype, device=probs.device
            ).uniform_()
        for row, seq in enumerate(seqs):
            seed = seq.params.sampling.seed
            if seed is not None:
                noise[row] = self._seeded_uniform(seq, seed, probs.shape[1], probs.dtype)
        # -log(U) is Exp(1); drawn this way because uniform_ is several times faster than
        # exponential_ on CPU, and this runs over the whole vocabulary every step.
        exponential = noise.log_().neg_()
        return probs.div_(exponential).argmax(dim=-1)

    def _seeded_uniform(
        self, seq: Sequence, seed: int, vocab_size: int, dtype: torch.dtype
    ) -> torch.Tensor:
        if seq.draws.generator is None:
            seq.draws.generator = torch.Generator(device=self.device)
            seq.draws.generator.manual_seed(seed)
            # A resumed request makes the draws its earlier tokens made, so it continues
            # exactly as the uninterrupted run would have.
            for _ in range(seq.draws.num_to_replay):
                torch.empty(vocab_size, dtype=dtype, device=self.device).uniform_(generator=seq.draws.generator)
            seq.draws.num_to_replay = 0
        return torch.empty(vocab_size, dtype=dtype, device=self.device).uniform_(generator=seq.draws.generator)

    @staticmethod
    def _apply_top_k_top_p(logits: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
        vocab_size = logits.shape[1]
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab_size, device=logits.device)[None, :]
        k = torch.tensor([value if value > 0 else vocab_size for value in top_k], device=logits.device)
        sorted_logits.masked_fill_(ranks >= k[:, None], float("-inf"))
        if any(p < 1.0 for p in top_p):
            sorted_probs = sorted_logits.softmax(dim=-1)
            # Keep the smallest head whose mass reaches top_p: a token stays if the mass
            # before it is still short of top_p, so the most likely token always stays.
            mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
            p = torch.tensor(top_p, dtype=torch.float32, device=logits.device)[:, None]
            sorted_logits.masked_fill_(mass_before >= p, float("-inf"))
        return torch.full_like(logits, float("-inf")).scatter_(1, order, sorted_logits)
