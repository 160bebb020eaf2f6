"""Sampling-time logit processing in one pass: repetition, frequency and presence penalties,
logit bias and forced tokens; kernel, launcher, reference. Top-k/top-p/min-p sampling is
left to torch (sort-based), which is exact and not the bottleneck."""

from __future__ import annotations

import torch

from kernels._launch import check_launchable, check_shape, check_tensor, tl, triton

VOCAB_PER_PROGRAM = 1024


@triton.jit
def _apply_logits_processors_kernel(
    logits_ptr,
    counts_ptr,
    prompt_mask_ptr,
    presence_ptr,
    frequency_ptr,
    repetition_ptr,
    logit_bias_ptr,
    forced_token_ids_ptr,
    logits_row_stride,
    counts_row_stride,
    prompt_mask_row_stride,
    logit_bias_row_stride,
    vocab_size,
    HAS_LOGIT_BIAS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    tokens = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    in_vocab = tokens < vocab_size
    logits = tl.load(logits_ptr + row * logits_row_stride + tokens, mask=in_vocab, other=0.0)
    counts = tl.load(counts_ptr + row * counts_row_stride + tokens, mask=in_vocab, other=0)
    in_prompt = tl.load(
        prompt_mask_ptr + row * prompt_mask_row_stride + tokens, mask=in_vocab, other=0
    )
    generated = counts > 0
    repetition = tl.load(repetition_ptr + row)
    penalized = tl.where(logits > 0, logits / repetition, logits * repetition)
    logits = tl.where(generated | (in_prompt != 0), penalized, logits)
    frequency = tl.load(frequency_ptr + row)
    presence = tl.load(presence_ptr + row)
    logits = logits - (frequency * counts.to(tl.float32) + presence * generated.to(tl.float32))
    if HAS_LOGIT_BIAS:
        logits += tl.load(
            logit_bias_ptr + row * logit_bias_row_stride + tokens, mask=in_vocab, other=0.0
        )
    forced = tl.load(forced_token_ids_ptr + row)
    logits = tl.where((forced < 0) | (tokens == forced), logits, float("-inf"))
    tl.store(logits_ptr + row * logits_row_stride + tokens, logits, mask=in_vocab)


def apply_logits_processors(
    logits: torch.Tensor,
    output_token_counts: torch.Tensor,
    prompt_token_mask: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
    repetition: torch.Tensor,
    logit_bias: torch.Tensor | None,
    forced_token_ids: torch.Tensor,
) -> None:
    """Apply, in place on logits[B, V]: repetition penalty (prompt and output tokens), then
    frequency/presence penalties (output tokens), then logit_bias, then forced tokens
    (a row with forced_token_ids[b] >= 0 keeps only that logit; the rest become -inf)."""
    check_tensor("logits", logits, ndim=2, dtypes=(torch.float32,))
    batch, vocab_size = logits.shape
    check_tensor("output_token_counts", output_token_counts, ndim=2, dtypes=(torch.int32,))
    check_shape("output_token_counts", output_token_counts, (batch, vocab_size))
    check_tensor("prompt_token_mask", prompt_token_mask, ndim=2, dtypes=(torch.bool,))
    check_shape("prompt_token_mask", prompt_token_mask, (batch, vocab_size))
    for name, per_row in (
        ("presence", presence),
        ("frequency", frequency),
        ("repetition", repetition),
    ):
        check_tensor(name, per_row, ndim=1, dtypes=(torch.float32,), inner_contiguous=False)
        check_shape(name, per_row, (batch,))
    if logit_bias is not None:
        check_tensor("logit_bias", logit_bias, ndim=2, dtypes=(torch.float32,))
        check_shape("logit_bias", logit_bias, (batch, vocab_size))
    check_tensor(
        "forced_token_ids", forced_token_ids, ndim=1, dtypes=(torch.int64,), inner_contiguous=False
    )
    check_shape("forced_token_ids", forced_token_ids, (batch,))
    check_launchable(
        logits=logits,
        output_token_counts=output_token_counts,
        prompt_token_mask=prompt_token_mask,
        presence=presence,
        frequency=frequency,
        repetition=repetition,
        logit_bias=logit_bias,
        forced_token_ids=forced_token_ids,
    )
    if batch == 0 or vocab_size == 0:
        return
    grid = (batch, triton.cdiv(vocab_size, VOCAB_PER_PROGRAM))
    _apply_logits_processors_kernel[grid](
        logits,
        output_token_counts,
        prompt_token_mask.view(torch.uint8),  # bytes, not i1, so loads are plain byte loads
        presence.contiguous(),
        frequency.contiguous(),
        repetition.contiguous(),
        logit_bias if logit_bias is not None else logits,
        forced_token_ids.contiguous(),
        logits.stride(0),
        output_token_counts.stride(0),
        prompt_token_mask.stride(0),
        logit_bias.stride(0) if logit_bias is not None else 0,
        vocab_size,
        HAS_LOGIT_BIAS=logit_bias is not None,
        BLOCK_V=VOCAB_PER_PROGRAM,
        num_warps=4,
    )


def apply_logits_processors_ref(
    logits: torch.Tensor,
    output_token_counts: torch.Tensor,
    prompt_token_mask: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
    repetition: torch.Tensor,
    logit_bias: torch.Tensor | None,
    forced_token_ids: torch.Tensor,
) -> None:
    """Plain-torch version of the same steps, in place. Each penalty touches only the rows
    whose parameter is not neutral, since most requests leave them at their defaults."""
    penalized_rows = (repetition != 1).nonzero().squeeze(1)
    if penalized_rows.numel() > 0:
        rows = logits[penalized_rows]
        per_row = repetition[penalized_rows].to(logits.dtype)[:, None]
        seen = prompt_token_mask[penalized_rows] | (output_token_counts[penalized_rows] > 0)
        penalized = torch.where(rows > 0, rows / per_row, rows * per_row)
        logits[penalized_rows] = torch.where(seen, penalized, rows)
    penalized_rows = ((frequency != 0) | (presence != 0)).nonzero().squeeze(1)
    if penalized_rows.numel() > 0:
        counts = output_token_counts[penalized_rows].to(logits.dtype)
        penalty = frequency[penalized_rows].to(logits.dtype)[:, None] * counts
        penalty += presence[penalized_rows].to(logits.dtype)[:, None] * (counts > 0)
        logits[penalized_rows] = logits[penalized_rows] - penalty
    if logit_bias is not None:
        logits.add_(logit_bias)
    forced_rows = (forced_token_ids >= 0).nonzero().squeeze(1)
    if forced_rows.numel() > 0:
        forced_ids = forced_token_ids[forced_rows]
        kept = logits[forced_rows, forced_ids]
        logits[forced_rows] = float("-inf")
        logits[forced_rows, forced_ids] = kept
