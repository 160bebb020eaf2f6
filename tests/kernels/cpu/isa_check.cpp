// The fused quantized linear and decode attention alone, as torch.ops.spate_isa_check: the
// test that compares these ops built for another vector ISA with the library built for
// this CPU (tests/kernels/test_cpu_ops.py) compiles them with their sources in
// kernels/cpu for that ISA.

#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(spate_isa_check, m) {
  m.def("quantized_linear(Tensor x, Tensor codes, Tensor scales, Tensor? mins, int bits, "
        "int offset) -> Tensor");
  m.def("paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, int? sliding_window=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(spate_isa_check, CPU, m) {
  m.impl("quantized_linear", TORCH_FN(spate_cpu::quantized_linear));
  m.impl("paged_decode_attention", TORCH_FN(spate_cpu::paged_decode_attention));
}
