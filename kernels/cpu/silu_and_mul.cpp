// silu(gate) * up, each row from its own gate and up halves.

#include <ATen/Dispatch.h>

#include <vector>

#include "chunk_pool.h"
#include "ops.h"
#include "simd.h"

namespace spate_cpu {
namespace {

template <typename T>
void silu_and_mul_row(const T* __restrict row, T* __restrict out, float* __restrict gate,
                      int64_t half) {
  for (int64_t i = 0; i < half; ++i) gate[i] = -to_float(row[i]);
  exp_in_place(gate, 0.0f, half);  // exp(-g)
  for (int64_t i = 0; i < half; ++i) {
    const float g = to_float(row[i]);
    out[i] = from_float<T>(g / (1.0f + gate[i]) * to_float(row[half + i]));
  }
}

}  // namespace

at::Tensor silu_and_mul(const at::Tensor& x) {
  check_cpu(x, "x");
  const int64_t width = x.size(-1);
  TORCH_CHECK(width % 2 == 0, "x's last dim must be even (gate and up halves), got ", width);
  const int64_t half = width / 2;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = half;
  at::Tensor out = at::empty(shape, x.options());
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "silu_and_mul", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    dealt_parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
      std::vector<float> gate(half);
      for (int64_t r = begin; r < end; ++r) {
        silu_and_mul_row(in + r * width, o + r * half, gate.data(), half);
      }
    });
  });
  return out;
}

}  // namespace spate_cpu
