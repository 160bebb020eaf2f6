// Prefill attention: each new token of each sequence over its paged cache, causally (and
// within its sliding window, where there is one), through decode attention's routine
// (paged_attention.h).

#include <ATen/Dispatch.h>

#include <vector>

#include "chunk_pool.h"
#include "ops.h"
#include "paged_attention.h"

namespace spate_cpu {

at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const at::Tensor& block_tables,
                             const at::Tensor& cu_seqlens_q, const at::Tensor& context_lens,
                             double scale, const c10::optional<int64_t>& sliding_window) {
  check_paged(q, k_cache, v_cache, block_tables, context_lens);
  check_window(sliding_window);
  at::Tensor starts = cu_seqlens_q.to(at::kLong).contiguous();
  at::Tensor lens = context_lens.contiguous();
  const int64_t tokens = q.size(0), num_heads = q.size(1), head_dim = q.size(2);
  const int64_t block_size = k_cache.size(1), num_kv_heads = k_cache.size(2);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t batch = lens.size(0);
  const int64_t table_width = block_tables.size(1);
  TORCH_CHECK(starts.size(0) == batch + 1 && block_tables.size(0) == batch,
              "cu_seqlens_q needs B + 1 entries and block_tables B rows");
  const int64_t* first = starts.data_ptr<int64_t>();
  const int32_t* lengths = lens.data_ptr<int32_t>();
  TORCH_CHECK(first[batch] == tokens, "cu_seqlens_q must end at the number of query rows");
  // Each query row's sequence and its context (its own position + 1).
  std::vector<int64_t> row_seq(tokens), row_context(tokens);
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t q_len = first[s + 1] - first[s];
    TORCH_CHECK(q_len >= 0, "cu_seqlens_q must not decrease");
    TORCH_CHECK(lengths[s] >= q_len, "sequence ", s, ": context length ", lengths[s],
                " is shorter than its ", q_len, " new tokens");
    TORCH_CHECK(lengths[s] <= table_width * block_size,
                "context length ", lengths[s], " of sequence ", s, " exceeds its block table");
    // The earliest new token's window reaches back furthest.
    check_blocks(block_tables.data_ptr<int32_t>() + s * table_width,
                 window_start(lengths[s] - q_len + 1, sliding_window), lengths[s], block_size,
                 k_cache.size(0), s);
    for (int64_t i = 0; i < q_len; ++i) {
      row_seq[first[s] + i] = s;
      row_context[first[s] + i] = lengths[s] - q_len + i + 1;
    }
  }
  at::Tensor out = at::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "prefill_attention", [&] {
    const scalar_t* queries = q.data_ptr<scalar_t>();
    const scalar_t* keys = k_cache.data_ptr<scalar_t>();
    const scalar_t* values = v_cache.data_ptr<scalar_t>();
    const int32_t* tables = block_tables.data_ptr<int32_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t heads = heads_per_task(tokens, num_kv_heads, group);
    dealt_parallel_for(0, tokens * num_heads / heads, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores, scaled_query, acc;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t row = task * heads;  // the task's first (token, head) pair
        const int64_t t = row / num_heads, head = row % num_heads;
        attend_heads(queries + row * head_dim, heads, static_cast<float>(scale), keys, values,
                     tables + row_seq[t] * table_width, block_size, num_kv_heads, head / group,
                     head_dim, window_start(row_context[t], sliding_window), row_context[t],
                     scores, scaled_query, acc, o + row * head_dim);
      }
    });
  });
  return out;
}

}  // namespace spate_cpu
