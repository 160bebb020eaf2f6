// A stack of Llama decoder layers in one call: its weights, named as the modules of
// workers/model/llama.py name them, held by a torch class that Python builds once per
// model (workers/model/fused_layers.py) and passes to the op at every step.

#pragma once

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace spate_cpu {

// One linear layer's weight as quantized_linear takes it: codes, float32 scales, mins
// where the format has them (Q4_1), bits (4 or 8) and the offset stored codes carry.
struct QuantizedWeight : torch::CustomClassHolder {
  QuantizedWeight(at::Tensor codes, at::Tensor scales, c10::optional<at::Tensor> mins,
                  int64_t bits, int64_t offset);

  at::Tensor operator()(const at::Tensor& x) const;

  at::Tensor codes, scales;
  c10::optional<at::Tensor> mins;
  int64_t bits, offset;
};

using Linear = c10::intrusive_ptr<QuantizedWeight>;

// One decoder layer: its two norms' weights, its four linears and its attention's sliding
// window (none: the whole context).
struct LayerWeights {
  at::Tensor input_layernorm;
  Linear qkv_proj, o_proj;
  at::Tensor post_attention_layernorm;
  Linear gate_up_proj, down_proj;
  c10::optional<int64_t> sliding_window;
};

// Every layer of a model, in order, and the shapes its attention needs.
struct DecoderStack : torch::CustomClassHolder {
  DecoderStack(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
               double scale);

  void add_layer(at::Tensor input_layernorm, Linear qkv_proj, Linear o_proj,
                 at::Tensor post_attention_layernorm, Linear gate_up_proj, Linear down_proj,
                 c10::optional<int64_t> sliding_window);

  int64_t num_heads, num_kv_heads, head_dim;
  double eps, scale;
  std::vector<LayerWeights> layers;
};

// (hidden, residual) after every layer of `stack`, before the final norm. A prefill
// passes cu_seqlens_q; a decode step passes none.
std::tuple<at::Tensor, at::Tensor> decoder_layers(
    const c10::intrusive_ptr<DecoderStack>& stack, const at::Tensor& embedded,
    const at::Tensor& positions, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
    const at::Tensor& context_lens, const c10::optional<at::Tensor>& cu_seqlens_q,
    const at::Tensor& cos_sin_cache, at::TensorList k_caches, at::TensorList v_caches);

}  // namespace spate_cpu
