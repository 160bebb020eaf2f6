// This step's keys and values into their cache slots.

#include <ATen/Dispatch.h>

#include "ops.h"
#include "simd.h"

namespace spate_cpu {
namespace {

template <typename S, typename C>
void store_rows(const S* k, const S* v, C* k_cache, C* v_cache, const int64_t* slots,
                int64_t tokens, int64_t row) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;  // a token whose key and value must not be stored
    const S* ks = k + t * row;
    const S* vs = v + t * row;
    C* kd = k_cache + slots[t] * row;
    C* vd = v_cache + slots[t] * row;
    for (int64_t i = 0; i < row; ++i) kd[i] = from_float<C>(to_float(ks[i]));
    for (int64_t i = 0; i < row; ++i) vd[i] = from_float<C>(to_float(vs[i]));
  }
}

}  // namespace

void store_kv_cache(const at::Tensor& k, const at::Tensor& v, at::Tensor k_cache,
                    at::Tensor v_cache, const at::Tensor& slot_mapping) {
  check_cpu(k, "k");
  check_cpu(v, "v");
  check_cpu(k_cache, "k_cache");
  check_cpu(v_cache, "v_cache");
  TORCH_CHECK(k.dim() == 3 && k.sizes() == v.sizes(), "k and v must both be [T, Hk, D]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(),
              "k_cache and v_cache must both be [N, block_size, Hk, D]");
  TORCH_CHECK(k.size(1) == k_cache.size(2) && k.size(2) == k_cache.size(3),
              "k's heads and head size differ from the cache's");
  TORCH_CHECK(k.scalar_type() == v.scalar_type() && k_cache.scalar_type() == v_cache.scalar_type(),
              "k and v, and the two caches, must share a dtype");
  at::Tensor slots = slot_mapping.to(at::kLong).contiguous();
  TORCH_CHECK(slots.dim() == 1 && slots.size(0) == k.size(0), "slot_mapping must be [T]");
  const int64_t capacity = k_cache.size(0) * k_cache.size(1);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < slots.size(0); ++t) {
    TORCH_CHECK(slot[t] < capacity, "slot ", slot[t], " of token ", t, " is past the cache's ",
                capacity, " slots");
  }
  const int64_t row = k.size(1) * k.size(2);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k.scalar_type(), "store_kv_cache", [&] {
    using S = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "store_kv_cache_to", [&] {
      store_rows<S, scalar_t>(k.data_ptr<S>(), v.data_ptr<S>(), k_cache.data_ptr<scalar_t>(),
                              v_cache.data_ptr<scalar_t>(), slot, k.size(0), row);
    });
  });
}

}  // namespace spate_cpu
