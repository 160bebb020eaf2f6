// torch.ops.spate_cpu: every fused op's schema and CPU kernel, and the classes that hold
// the decoder layers' weights (decoder_layers.h). kernels/cpu_ops.py is their one caller.

#include <torch/library.h>

#include "decoder_layers.h"
#include "ops.h"

using spate_cpu::DecoderStack;
using spate_cpu::Linear;
using spate_cpu::QuantizedWeight;

TORCH_LIBRARY(spate_cpu, m) {
  m.class_<QuantizedWeight>("QuantizedWeight")
      .def(torch::init<at::Tensor, at::Tensor, c10::optional<at::Tensor>, int64_t, int64_t>(),
           "", {torch::arg("codes"), torch::arg("scales"), torch::arg("mins"), torch::arg("bits"),
                torch::arg("offset")});
  m.class_<DecoderStack>("DecoderStack")
      .def(torch::init<int64_t, int64_t, int64_t, double, double>(), "",
           {torch::arg("num_heads"), torch::arg("num_kv_heads"), torch::arg("head_dim"),
            torch::arg("eps"), torch::arg("scale")})
      .def("add_layer", &DecoderStack::add_layer, "",
           {torch::arg("input_layernorm"), torch::arg("qkv_proj"), torch::arg("o_proj"),
            torch::arg("post_attention_layernorm"), torch::arg("gate_up_proj"),
            torch::arg("down_proj"), torch::arg("sliding_window") = torch::arg::none()})
      .def("__len__", [](const c10::intrusive_ptr<DecoderStack>& self) {
        return static_cast<int64_t>(self->layers.size());
      });
  m.def("rms_norm(Tensor x, Tensor weight, float eps, Tensor? residual) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("store_kv_cache(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor slot_mapping) -> ()");
  m.def("rotary_embedding(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos_sin_cache) -> ()");
  m.def("paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, int? sliding_window=None) -> Tensor");
  m.def("prefill_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor cu_seqlens_q, Tensor context_lens, float scale, int? sliding_window=None) "
        "-> Tensor");
  m.def("quantized_linear(Tensor x, Tensor codes, Tensor scales, Tensor? mins, int bits, "
        "int offset) -> Tensor");
  m.def("decoder_layers(__torch__.torch.classes.spate_cpu.DecoderStack stack, Tensor hidden, "
        "Tensor positions, Tensor slot_mapping, Tensor block_tables, Tensor context_lens, "
        "Tensor? cu_seqlens_q, Tensor cos_sin_cache, Tensor(a!)[] k_caches, "
        "Tensor(b!)[] v_caches) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(spate_cpu, CPU, m) {
  m.impl("rms_norm", TORCH_FN(spate_cpu::rms_norm));
  m.impl("silu_and_mul", TORCH_FN(spate_cpu::silu_and_mul));
  m.impl("store_kv_cache", TORCH_FN(spate_cpu::store_kv_cache));
  m.impl("rotary_embedding", TORCH_FN(spate_cpu::rotary_embedding));
  m.impl("paged_decode_attention", TORCH_FN(spate_cpu::paged_decode_attention));
  m.impl("prefill_attention", TORCH_FN(spate_cpu::prefill_attention));
  m.impl("quantized_linear", TORCH_FN(spate_cpu::quantized_linear));
  m.impl("decoder_layers", TORCH_FN(spate_cpu::decoder_layers));
}
