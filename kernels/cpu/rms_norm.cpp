// RMSNorm, optionally after adding the residual (kept in fp32).

#include <ATen/Dispatch.h>

#include <vector>

#include "chunk_pool.h"
#include "ops.h"
#include "simd.h"

namespace spate_cpu {
namespace {

template <typename T, typename R>
void rms_norm_rows(const T* x, const R* residual_in, float* residual_out, const at::Tensor& weight,
                   T* out, int64_t rows, int64_t hidden, double eps) {
  at::Tensor weight32 = weight.to(at::kFloat).contiguous();
  const float* w = weight32.data_ptr<float>();
  dealt_parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(hidden);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * hidden;
      float* values = residual_out != nullptr ? residual_out + r * hidden : row.data();
      if (residual_in != nullptr) {
        const R* rr = residual_in + r * hidden;
        for (int64_t i = 0; i < hidden; ++i) values[i] = to_float(xr[i]) + to_float(rr[i]);
      } else {
        for (int64_t i = 0; i < hidden; ++i) values[i] = to_float(xr[i]);
      }
      const float inverse =
          1.0f / std::sqrt(sum_of_squares(values, hidden) / static_cast<float>(hidden) +
                           static_cast<float>(eps));
      T* o = out + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) o[i] = from_float<T>(values[i] * inverse * w[i]);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& weight,
                                            double eps, const c10::optional<at::Tensor>& residual) {
  check_cpu(x, "x");
  const int64_t hidden = x.size(-1);
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  at::Tensor out = at::empty_like(x);
  at::Tensor residual_out;
  if (residual.has_value()) {
    check_cpu(*residual, "residual");
    TORCH_CHECK(residual->scalar_type() == at::kFloat, "residual must be float32");
    TORCH_CHECK(residual->sizes() == x.sizes(), "residual must have x's shape");
    residual_out = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  }
  float* residual_out_ptr = residual.has_value() ? residual_out.data_ptr<float>() : nullptr;
  const float* residual_ptr = residual.has_value() ? residual->data_ptr<float>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_norm_rows<scalar_t, float>(x.data_ptr<scalar_t>(), residual_ptr, residual_out_ptr, weight,
                                   out.data_ptr<scalar_t>(), rows, hidden, eps);
  });
  return {out, residual_out};
}

}  // namespace spate_cpu
