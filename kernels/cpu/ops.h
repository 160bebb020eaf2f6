// The CPU path's fused ops: one call per op and layer where the torch references take
// five to twenty (each an ATen dispatch of a few microseconds, which at one decode row
// cost more than the arithmetic). One source file each; library.cpp registers them as
// torch.ops.spate_cpu, and kernels/cpu_ops.py builds them at first use.
//
// Every value a row produces is computed by one thread, in one fixed order, from that
// row's own inputs: a sequence's bits never depend on its batch, on the thread count or
// on the instruction set (sums run over 16 fixed lanes, simd.h; built with
// -ffp-contract=off). Prefill attention runs each query through decode attention's
// routine, so a prefilled token gets the bits a decode step would have given it
// (docs/reliability.md).

#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

namespace spate_cpu {

inline void check_cpu(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// RMSNorm of x, after adding the fp32 residual where one is given: (out, x + residual).
std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& weight,
                                            double eps, const c10::optional<at::Tensor>& residual);

// silu(gate) * up of x = [..., gate | up].
at::Tensor silu_and_mul(const at::Tensor& x);

// Neox rotary embedding of q [T, Hq, D] and k [T, Hk, D], in place.
void rotary_embedding(at::Tensor q, at::Tensor k, const at::Tensor& positions,
                      const at::Tensor& cos_sin_cache);

// Each token's k and v to its cache slot; slot -1 is skipped.
void store_kv_cache(const at::Tensor& k, const at::Tensor& v, at::Tensor k_cache,
                    at::Tensor v_cache, const at::Tensor& slot_mapping);

// One query row per sequence over its paged cache; with a sliding window W, over its
// last W positions only (the query at p sees p - W < k <= p).
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, double scale,
                                  const c10::optional<int64_t>& sliding_window);

// Every new token of each sequence (cu_seqlens_q) over its paged cache, causally, within
// its sliding window where there is one.
at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const at::Tensor& block_tables,
                             const at::Tensor& cu_seqlens_q, const at::Tensor& context_lens,
                             double scale, const c10::optional<int64_t>& sliding_window);

// x [M, K] float32 times a GGUF file's quantized weight [N, K] transposed: [M, N].
at::Tensor quantized_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                            const c10::optional<at::Tensor>& mins, int64_t bits, int64_t offset);

}  // namespace spate_cpu
