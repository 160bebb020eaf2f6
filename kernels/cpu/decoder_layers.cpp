// The decoder layers: what workers/model/llama.py's modules compute over these ops, call
// for call and in the same order, so the bits are theirs (tests/workers/model/test_fused_layers.py).
// One call saves the Python and dispatch of about ten op calls a layer, which at one
// decode row cost as much as the attention.

#include "decoder_layers.h"

#include <utility>

#include "chunk_pool.h"
#include "ops.h"

namespace spate_cpu {

QuantizedWeight::QuantizedWeight(at::Tensor codes, at::Tensor scales,
                                 c10::optional<at::Tensor> mins, int64_t bits, int64_t offset)
    : codes(std::move(codes)), scales(std::move(scales)), mins(std::move(mins)), bits(bits),
      offset(offset) {
  // 4 or 8 in groups of 32; 4, 5 or 6 in K-quant super-blocks (quantized_linear checks).
  TORCH_CHECK(bits >= 4 && bits <= 8, "bits must be 4 to 8, got ", bits);
}

at::Tensor QuantizedWeight::operator()(const at::Tensor& x) const {
  return quantized_linear(x, codes, scales, mins, bits, offset);
}

DecoderStack::DecoderStack(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
                           double scale)
    : num_heads(num_heads), num_kv_heads(num_kv_heads), head_dim(head_dim), eps(eps),
      scale(scale) {}

void DecoderStack::add_layer(at::Tensor input_layernorm, Linear qkv_proj, Linear o_proj,
                             at::Tensor post_attention_layernorm, Linear gate_up_proj,
                             Linear down_proj, c10::optional<int64_t> sliding_window) {
  TORCH_CHECK(!sliding_window.has_value() || *sliding_window >= 1,
              "sliding_window must be at least 1");
  layers.push_back({std::move(input_layernorm), std::move(qkv_proj), std::move(o_proj),
                    std::move(post_attention_layernorm), std::move(gate_up_proj),
                    std::move(down_proj), sliding_window});
}

std::tuple<at::Tensor, at::Tensor> decoder_layers(
    const c10::intrusive_ptr<DecoderStack>& stack, const at::Tensor& embedded,
    const at::Tensor& positions, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
    const at::Tensor& context_lens, const c10::optional<at::Tensor>& cu_seqlens_q,
    const at::Tensor& cos_sin_cache, at::TensorList k_caches, at::TensorList v_caches) {
  const PoolScope on_the_pool;
  const int64_t layers = static_cast<int64_t>(stack->layers.size());
  TORCH_CHECK(static_cast<int64_t>(k_caches.size()) == layers &&
                  static_cast<int64_t>(v_caches.size()) == layers,
              "need one k and one v cache for each of the ", layers, " layers, got ",
              k_caches.size(), " and ", v_caches.size());
  TORCH_CHECK(embedded.dim() == 2 && embedded.scalar_type() == at::kFloat,
              "hidden states must be [T, H] float32");
  const int64_t tokens = embedded.size(0);
  const int64_t num_heads = stack->num_heads, num_kv_heads = stack->num_kv_heads;
  const int64_t head_dim = stack->head_dim;
  const int64_t q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
  const at::Tensor blocks = block_tables.contiguous();
  at::Tensor hidden = embedded.contiguous();
  at::Tensor residual;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const LayerWeights& w = stack->layers[layer];
    if (layer == 0) {
      residual = hidden;
      hidden = std::get<0>(rms_norm(hidden, w.input_layernorm, stack->eps, c10::nullopt));
    } else {
      std::tie(hidden, residual) = rms_norm(hidden, w.input_layernorm, stack->eps, residual);
    }
    const at::Tensor qkv = (*w.qkv_proj)(hidden);
    at::Tensor q = qkv.narrow(1, 0, q_size).reshape({tokens, num_heads, head_dim}).contiguous();
    at::Tensor k = qkv.narrow(1, q_size, kv_size).reshape({tokens, num_kv_heads, head_dim}).contiguous();
    at::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size)
                       .reshape({tokens, num_kv_heads, head_dim})
                       .contiguous();
    rotary_embedding(q, k, positions, cos_sin_cache);
    store_kv_cache(k, v, k_caches[layer], v_caches[layer], slot_mapping);
    const at::Tensor attended =
        cu_seqlens_q.has_value()
            ? prefill_attention(q, k_caches[layer], v_caches[layer], blocks, *cu_seqlens_q,
                                context_lens, stack->scale, w.sliding_window)
            : paged_decode_attention(q, k_caches[layer], v_caches[layer], blocks, context_lens,
                                     stack->scale, w.sliding_window);
    hidden = (*w.o_proj)(attended.reshape({tokens, q_size}));
    std::tie(hidden, residual) = rms_norm(hidden, w.post_attention_layernorm, stack->eps, residual);
    hidden = (*w.down_proj)(silu_and_mul((*w.gate_up_proj)(hidden)));
  }
  return {hidden, residual};
}

}  // namespace spate_cpu
