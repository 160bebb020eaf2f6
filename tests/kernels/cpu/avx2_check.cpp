// The fused quantized linear alone, as torch.ops.spate_avx2_check: the test that compares
// the op built for AVX2 with the library built for this CPU (tests/kernels/test_cpu_ops.py)
// compiles it with kernels/cpu/quantized_linear.cpp for AVX2 + FMA.

#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(spate_avx2_check, m) {
  m.def("quantized_linear(Tensor x, Tensor codes, Tensor scales, Tensor? mins, int bits, "
        "int offset) -> Tensor");
}

TORCH_LIBRARY_IMPL(spate_avx2_check, CPU, m) {
  m.impl("quantized_linear", TORCH_FN(spate_cpu::quantized_linear));
}
