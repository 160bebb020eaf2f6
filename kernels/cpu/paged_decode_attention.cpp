// Decode attention: one query row per sequence over its paged cache.

#include <ATen/Dispatch.h>

#include <vector>

#include "chunk_pool.h"
#include "ops.h"
#include "paged_attention.h"

namespace spate_cpu {

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, double scale,
                                  const c10::optional<int64_t>& sliding_window) {
  check_paged(q, k_cache, v_cache, block_tables, context_lens);
  check_window(sliding_window);
  at::Tensor lens = context_lens.contiguous();
  const int64_t batch = q.size(0), num_heads = q.size(1), head_dim = q.size(2);
  const int64_t block_size = k_cache.size(1), num_kv_heads = k_cache.size(2);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t table_width = block_tables.size(1);
  TORCH_CHECK(block_tables.size(0) == batch && lens.size(0) == batch,
              "block_tables and context_lens need one row per query");
  const int32_t* lengths = lens.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(lengths[b] >= 0 && lengths[b] <= table_width * block_size,
                "context length ", lengths[b], " of row ", b, " exceeds its block table");
    check_blocks(block_tables.data_ptr<int32_t>() + b * table_width,
                 window_start(lengths[b], sliding_window), lengths[b], block_size,
                 k_cache.size(0), b);
  }
  at::Tensor out = at::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode_attention", [&] {
    const scalar_t* queries = q.data_ptr<scalar_t>();
    const scalar_t* keys = k_cache.data_ptr<scalar_t>();
    const scalar_t* values = v_cache.data_ptr<scalar_t>();
    const int32_t* tables = block_tables.data_ptr<int32_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t heads = heads_per_task(batch, num_kv_heads, group);
    dealt_parallel_for(0, batch * num_heads / heads, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores, scaled_query, acc;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t row = task * heads;  // the task's first (sequence, head) pair
        const int64_t b = row / num_heads, head = row % num_heads;
        attend_heads(queries + row * head_dim, heads, static_cast<float>(scale), keys, values,
                     tables + b * table_width, block_size, num_kv_heads, head / group, head_dim,
                     window_start(lengths[b], sliding_window), lengths[b], scores,
                     scaled_query, acc, o + row * head_dim);
      }
    });
  });
  return out;
}

}  // namespace spate_cpu
