// Attention over the paged cache: the routine both attention ops run for each query row
// and KV head (paged_decode_attention.cpp, prefill_attention.cpp). Prefill calling decode's
// very routine is what gives a prefilled token the bits a decode step would give it.

#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "simd.h"

namespace spate_cpu {

template <typename T>
inline void accumulate(float* __restrict acc, float weight, const T* __restrict value, int64_t n) {
  for (int64_t d = 0; d < n; ++d) acc[d] += weight * to_float(value[d]);
}

// A cached key or value a few positions ahead (past a block's end it is only a hint):
// each position's row sits a whole token stride after the last.
constexpr int64_t kPrefetchPositions = 4;

template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t at = 0; at < n * static_cast<int64_t>(sizeof(T)); at += 64) {
    __builtin_prefetch(bytes + at);
  }
}

// visit(l, row) for positions l < context in order, row pointing at position l's cached
// row (`cache` offset to the head and dims wanted): a cache block at a time, with no
// division per position.
template <typename T, typename Visit>
inline void for_each_position(const T* cache, const int32_t* block_table, int64_t block_size,
                              int64_t token_stride, int64_t context, Visit&& visit) {
  for (int64_t first = 0; first < context; first += block_size) {
    const T* block = cache + block_table[first / block_size] * block_size * token_stride;
    const int64_t last = std::min(context, first + block_size);
    for (int64_t l = first; l < last; ++l) visit(l, block + (l - first) * token_stride);
  }
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// Eight cached values as float32 (exact, as to_float converts them).
template <typename T>
inline __m256 load_m256(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  } else {
    float lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = to_float(p[j]);
    return _mm256_loadu_ps(lanes);
  }
}

// attend_one's two loops in 8-lane halves where the ISA has no 64-byte registers (GCC
// keeps a 64-byte vector in memory there): the same lanes, products and additions, so the
// same bits. A position's score is its 16 lanes summed by lane_sum's tree.
template <typename T>
inline float scores_m256(const float* query, const T* k_cache, const int32_t* block_table,
                         int64_t block_size, int64_t token_stride, int64_t head_dim,
                         int64_t context, float* scores) {
  float best = -INFINITY;
  for_each_position(k_cache, block_table, block_size, token_stride, context,
                    [&](int64_t l, const T* key) {
                      prefetch_row(key + kPrefetchPositions * token_stride, head_dim);
                      __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
                      for (int64_t i = 0; i < head_dim; i += kLanes) {
                        low = _mm256_add_ps(low, _mm256_mul_ps(_mm256_loadu_ps(query + i),
                                                               load_m256(key + i)));
                        high = _mm256_add_ps(high, _mm256_mul_ps(_mm256_loadu_ps(query + i + 8),
                                                                 load_m256(key + i + 8)));
                      }
                      scores[l] = lane_sum_m256(low, high);
                      best = std::max(best, scores[l]);
                    });
  return best;
}

// acc[d] = sum over positions of scores[l] * value[l][d] for 64 dims from d0.
template <typename T>
inline void weighted_values_m256(const T* values, const int32_t* block_table, int64_t block_size,
                                 int64_t token_stride, int64_t context, const float* scores,
                                 float* acc) {
  __m256 sum[8];
  for (int c = 0; c < 8; ++c) sum[c] = _mm256_setzero_ps();
  for_each_position(values, block_table, block_size, token_stride, context,
                    [&](int64_t l, const T* value) {
                      prefetch_row(value + kPrefetchPositions * token_stride, 4 * kLanes);
                      const __m256 weight = _mm256_set1_ps(scores[l]);
                      for (int c = 0; c < 8; ++c) {
                        sum[c] = _mm256_add_ps(sum[c], _mm256_mul_ps(weight, load_m256(value + 8 * c)));
                      }
                    });
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + 8 * c, sum[c]);
}
#define SPATE_M256_ATTENTION 1
#endif

// One query row over the first `context` cached positions of a sequence, for one KV head.
// scores and the output accumulator are the caller's scratch.
template <typename T>
inline void attend_one(const T* query, float scale, const T* k_cache, const T* v_cache,
                const int32_t* block_table, int64_t block_size, int64_t num_kv_heads,
                int64_t kv_head, int64_t head_dim, int64_t context, std::vector<float>& scores,
                std::vector<float>& scaled_query, std::vector<float>& acc, T* out) {
  if (context == 0) {
    for (int64_t d = 0; d < head_dim; ++d) out[d] = from_float<T>(0.0f);
    return;
  }
  for (int64_t d = 0; d < head_dim; ++d) scaled_query[d] = to_float(query[d]) * scale;
  scores.resize(context);
  const int64_t token_stride = num_kv_heads * head_dim;
  float best = -INFINITY;
#if defined(SPATE_M256_ATTENTION)
  if (head_dim % kLanes == 0) {
    best = scores_m256(scaled_query.data(), k_cache + kv_head * head_dim, block_table, block_size,
                       token_stride, head_dim, context, scores.data());
  } else
#endif
  if (head_dim % kLanes == 0) {
    // dot()'s sums, position by position, reduced 16 positions at a time (lane_sums):
    // the same bits without a trip through memory for each.
    f32x16 pending[kMaxTileSums];
    int count = 0;
    int64_t first = 0;
    const auto reduce = [&] {
      lane_sums(pending, count, scores.data() + first);
      for (int i = 0; i < count; ++i) best = std::max(best, scores[first + i]);
      first += count;
      count = 0;
    };
    for_each_position(k_cache + kv_head * head_dim, block_table, block_size, token_stride,
                      context, [&](int64_t, const T* key) {
                        prefetch_row(key + kPrefetchPositions * token_stride, head_dim);
                        f32x16 sum{};
                        for (int64_t i = 0; i < head_dim; i += kLanes) {
                          sum = sum + load_f32x16(scaled_query.data() + i) * load_as_f32x16(key + i);
                        }
                        pending[count++] = sum;
                        if (count == kMaxTileSums) reduce();
                      });
    if (count > 0) reduce();
  } else {
    for_each_position(k_cache + kv_head * head_dim, block_table, block_size, token_stride,
                      context, [&](int64_t l, const T* key) {
                        prefetch_row(key + kPrefetchPositions * token_stride, head_dim);
                        scores[l] = dot(scaled_query.data(), key, head_dim);
                        best = std::max(best, scores[l]);
                      });
  }
  exp_in_place(scores.data(), best, context);
  const float total = fixed_sum(scores.data(), context);
  // acc[d] += scores[l] * value[l][d], positions in order, 64 dims at a time held in
  // registers across positions (through memory, each position waited on the last).
  const T* values = v_cache + kv_head * head_dim;
  int64_t d0 = 0;
#if defined(SPATE_M256_ATTENTION)
  for (; d0 + 4 * kLanes <= head_dim; d0 += 4 * kLanes) {
    weighted_values_m256(values + d0, block_table, block_size, token_stride, context,
                         scores.data(), acc.data() + d0);
  }
#endif
  for (; d0 + 4 * kLanes <= head_dim; d0 += 4 * kLanes) {
    f32x16 sum[4] = {};
    for_each_position(values + d0, block_table, block_size, token_stride, context,
                      [&](int64_t l, const T* value) {
                        prefetch_row(value + kPrefetchPositions * token_stride, 4 * kLanes);
                        for (int c = 0; c < 4; ++c) {
                          sum[c] = sum[c] + scores[l] * load_as_f32x16(value + c * kLanes);
                        }
                      });
    std::memcpy(acc.data() + d0, sum, sizeof sum);
  }
  if (d0 < head_dim) {  // head dims that are not a multiple of 64
    std::fill(acc.begin() + d0, acc.begin() + head_dim, 0.0f);
    for_each_position(values + d0, block_table, block_size, token_stride, context,
                      [&](int64_t l, const T* value) {
                        accumulate(acc.data() + d0, scores[l], value, head_dim - d0);
                      });
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] = from_float<T>(acc[d] / total);
}

// The blocks a sequence's first `context` positions sit in must exist in the cache.
inline void check_blocks(const int32_t* table, int64_t context, int64_t block_size,
                         int64_t num_blocks, int64_t seq) {
  for (int64_t i = 0; i < (context + block_size - 1) / block_size; ++i) {
    TORCH_CHECK(table[i] >= 0 && table[i] < num_blocks, "block table entry ", i, " of row ", seq,
                " is ", table[i], ", not one of the cache's ", num_blocks, " blocks");
  }
}

inline void check_paged(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& block_tables, const at::Tensor& context_lens) {
  check_cpu(q, "q");
  check_cpu(k_cache, "k_cache");
  check_cpu(v_cache, "v_cache");
  check_cpu(block_tables, "block_tables");
  TORCH_CHECK(q.dim() == 3, "q must be [T, Hq, D]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(),
              "k_cache and v_cache must both be [N, block_size, Hk, D]");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.scalar_type() == v_cache.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt, "block_tables must be int32");
  TORCH_CHECK(context_lens.scalar_type() == at::kInt, "context_lens must be int32");
  TORCH_CHECK(q.size(2) == k_cache.size(3), "q's head size differs from the cache's");
  TORCH_CHECK(q.size(1) % k_cache.size(2) == 0, "query heads must be a multiple of KV heads");
}

}  // namespace spate_cpu
