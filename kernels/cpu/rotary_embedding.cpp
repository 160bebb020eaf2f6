// Neox rotary embedding of q and k, in place.

#include <ATen/Dispatch.h>

#include "chunk_pool.h"
#include "ops.h"
#include "simd.h"

namespace spate_cpu {
namespace {

template <typename T, typename C>
void rotate(T* x, int64_t tokens, int64_t heads, int64_t head_dim, const int64_t* positions,
            const C* cache) {
  const int64_t half = head_dim / 2;
  dealt_parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const C* cos = cache + positions[t] * head_dim;
      const C* sin = cos + half;
      for (int64_t h = 0; h < heads; ++h) {
        T* row = x + (t * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float first = to_float(row[i]);
          const float second = to_float(row[half + i]);
          const float c = to_float(cos[i]);
          const float s = to_float(sin[i]);
          row[i] = from_float<T>(first * c - second * s);
          row[half + i] = from_float<T>(second * c + first * s);
        }
      }
    }
  });
}

}  // namespace

void rotary_embedding(at::Tensor q, at::Tensor k, const at::Tensor& positions,
                      const at::Tensor& cos_sin_cache) {
  check_cpu(q, "q");
  check_cpu(k, "k");
  check_cpu(cos_sin_cache, "cos_sin_cache");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3, "q and k must be [T, H, D]");
  TORCH_CHECK(q.scalar_type() == k.scalar_type(), "q and k must share a dtype");
  at::Tensor pos = positions.to(at::kLong).contiguous();
  const int64_t* position = pos.data_ptr<int64_t>();
  TORCH_CHECK(pos.numel() == q.size(0) && k.size(0) == q.size(0),
              "positions, q and k need one row per token");
  for (int64_t t = 0; t < pos.numel(); ++t) {
    TORCH_CHECK(position[t] >= 0 && position[t] < cos_sin_cache.size(0), "position ", position[t],
                " of token ", t, " is outside the rotary table's ", cos_sin_cache.size(0), " rows");
  }
  const int64_t tokens = q.size(0);
  const int64_t head_dim = q.size(2);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "rotary_embedding", [&] {
    using T = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, cos_sin_cache.scalar_type(), "rotary_cache", [&] {
      rotate<T, scalar_t>(q.data_ptr<T>(), tokens, q.size(1), head_dim, pos.data_ptr<int64_t>(),
                          cos_sin_cache.data_ptr<scalar_t>());
      rotate<T, scalar_t>(k.data_ptr<T>(), tokens, k.size(1), head_dim, pos.data_ptr<int64_t>(),
                          cos_sin_cache.data_ptr<scalar_t>());
    });
  });
}

}  // namespace spate_cpu
