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

template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t at = 0; at < n * static_cast<int64_t>(sizeof(T)); at += 64) {
    __builtin_prefetch(bytes + at);
  }
}

// visit(l - start, row, ahead) for positions start <= l < context in order, row pointing
// at position l's cached row (`cache` offset to the head and dims wanted) and ahead at the
// row a block later in the sequence (the one to fetch now: a decode step's cache is mostly
// in no cache level, and a fixed four positions ahead came late and, past a block's end,
// pointed into some other sequence's block; in the last block, row itself). A cache
// block at a time, with no division per position; the table's entries for blocks wholly
// before `start` (a sliding window's) are never read.
template <typename T, typename Visit>
inline void for_each_position(const T* cache, const int32_t* block_table, int64_t block_size,
                              int64_t token_stride, int64_t start, int64_t context,
                              Visit&& visit) {
  const int64_t blocks = (context + block_size - 1) / block_size;
  const int64_t block_stride = block_size * token_stride;
  for (int64_t i = start / block_size; i < blocks; ++i) {
    const int64_t block_start = i * block_size;
    const T* block = cache + block_table[i] * block_stride;
    const T* next = i + 1 < blocks ? cache + block_table[i + 1] * block_stride : block;
    const int64_t last = std::min(context, block_start + block_size);
    for (int64_t l = std::max(block_start, start); l < last; ++l) {
      const int64_t at = (l - block_start) * token_stride;
      visit(l - start, block + at, next + at);
    }
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
                         int64_t start, int64_t context, float* scores) {
  float best = -INFINITY;
  for_each_position(k_cache, block_table, block_size, token_stride, start, context,
                    [&](int64_t l, const T* key, const T* ahead) {
                      prefetch_row(ahead, head_dim);
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
                                 int64_t token_stride, int64_t start, int64_t context,
                                 const float* scores, float* acc) {
  __m256 sum[8];
  for (int c = 0; c < 8; ++c) sum[c] = _mm256_setzero_ps();
  for_each_position(values, block_table, block_size, token_stride, start, context,
                    [&](int64_t l, const T* value, const T* ahead) {
                      prefetch_row(ahead, 4 * kLanes);
                      const __m256 weight = _mm256_set1_ps(scores[l]);
                      for (int c = 0; c < 8; ++c) {
                        sum[c] = _mm256_add_ps(sum[c], _mm256_mul_ps(weight, load_m256(value + 8 * c)));
                      }
                    });
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + 8 * c, sum[c]);
}
#define SPATE_M256_ATTENTION 1
#endif

// One query row over cached positions start <= l < context of a sequence (start is 0,
// or where a sliding window begins), for one KV head. scores and the output accumulator
// are the caller's scratch; scores[i] is position start + i's.
template <typename T>
inline void attend_one(const T* query, float scale, const T* k_cache, const T* v_cache,
                const int32_t* block_table, int64_t block_size, int64_t num_kv_heads,
                int64_t kv_head, int64_t head_dim, int64_t start, int64_t context,
                std::vector<float>& scores, std::vector<float>& scaled_query,
                std::vector<float>& acc, T* out) {
  const int64_t n = context - start;
  if (n <= 0) {
    for (int64_t d = 0; d < head_dim; ++d) out[d] = from_float<T>(0.0f);
    return;
  }
  for (int64_t d = 0; d < head_dim; ++d) scaled_query[d] = to_float(query[d]) * scale;
  scores.resize(n);
  const int64_t token_stride = num_kv_heads * head_dim;
  float best = -INFINITY;
#if defined(SPATE_M256_ATTENTION)
  if (head_dim % kLanes == 0) {
    best = scores_m256(scaled_query.data(), k_cache + kv_head * head_dim, block_table, block_size,
                       token_stride, head_dim, start, context, scores.data());
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
                      start, context, [&](int64_t, const T* key, const T* ahead) {
                        prefetch_row(ahead, head_dim);
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
                      start, context, [&](int64_t l, const T* key, const T* ahead) {
                        prefetch_row(ahead, head_dim);
                        scores[l] = dot(scaled_query.data(), key, head_dim);
                        best = std::max(best, scores[l]);
                      });
  }
  exp_in_place(scores.data(), best, n);
  const float total = fixed_sum(scores.data(), n);
  // acc[d] += scores[l] * value[l][d], positions in order, 64 dims at a time held in
  // registers across positions (through memory, each position waited on the last).
  const T* values = v_cache + kv_head * head_dim;
  int64_t d0 = 0;
#if defined(SPATE_M256_ATTENTION)
  for (; d0 + 4 * kLanes <= head_dim; d0 += 4 * kLanes) {
    weighted_values_m256(values + d0, block_table, block_size, token_stride, start, context,
                         scores.data(), acc.data() + d0);
  }
#endif
  for (; d0 + 4 * kLanes <= head_dim; d0 += 4 * kLanes) {
    f32x16 sum[4] = {};
    for_each_position(values + d0, block_table, block_size, token_stride, start, context,
                      [&](int64_t l, const T* value, const T* ahead) {
                        prefetch_row(ahead, 4 * kLanes);
                        for (int c = 0; c < 4; ++c) {
                          sum[c] = sum[c] + scores[l] * load_as_f32x16(value + c * kLanes);
                        }
                      });
    std::memcpy(acc.data() + d0, sum, sizeof sum);
  }
  if (d0 < head_dim) {  // head dims that are not a multiple of 64
    std::fill(acc.begin() + d0, acc.begin() + head_dim, 0.0f);
    for_each_position(values + d0, block_table, block_size, token_stride, start, context,
                      [&](int64_t l, const T* value, const T*) {
                        accumulate(acc.data() + d0, scores[l], value, head_dim - d0);
                      });
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] = from_float<T>(acc[d] / total);
}

// The most query heads of one KV head that attend together (attend_heads).
constexpr int kMaxGroup = 4;

// attend_one for G query heads that share KV head `kv_head` (queries and out: G rows of
// head_dim, one after another): one pass over the cached keys and one over the values
// serve every head. Each head's scores, weights, sums and their order are attend_one's,
// so each head gets attend_one's bits; the cache rows are read once, not once per head.
// For head dims a multiple of 64 and at least one position (start < context).
template <typename T, int G>
inline void attend_group(const T* queries, float scale, const T* k_cache, const T* v_cache,
                         const int32_t* block_table, int64_t block_size, int64_t num_kv_heads,
                         int64_t kv_head, int64_t head_dim, int64_t start, int64_t context,
                         std::vector<float>& scores, std::vector<float>& scaled_query,
                         std::vector<float>& acc, T* out) {
  const int64_t n = context - start;  // each head's row of scores
  scaled_query.resize(G * head_dim);
  scores.resize(G * n);
  acc.resize(G * head_dim);
  for (int64_t d = 0; d < G * head_dim; ++d) scaled_query[d] = to_float(queries[d]) * scale;
  const float* sq = scaled_query.data();
  float* sc = scores.data();
  const int64_t token_stride = num_kv_heads * head_dim;
  float best[G];
  for (int h = 0; h < G; ++h) best[h] = -INFINITY;
#if defined(SPATE_M256_ATTENTION)
  for_each_position(k_cache + kv_head * head_dim, block_table, block_size, token_stride, start,
                    context,
                    [&](int64_t l, const T* key, const T* ahead) {
                      prefetch_row(ahead, head_dim);
                      __m256 low[G], high[G];
                      for (int h = 0; h < G; ++h) low[h] = high[h] = _mm256_setzero_ps();
                      for (int64_t i = 0; i < head_dim; i += kLanes) {
                        const __m256 k_low = load_m256(key + i), k_high = load_m256(key + i + 8);
                        for (int h = 0; h < G; ++h) {
                          const float* q = sq + h * head_dim + i;
                          low[h] = _mm256_add_ps(low[h], _mm256_mul_ps(_mm256_loadu_ps(q), k_low));
                          high[h] = _mm256_add_ps(high[h], _mm256_mul_ps(_mm256_loadu_ps(q + 8), k_high));
                        }
                      }
                      for (int h = 0; h < G; ++h) {
                        sc[h * n + l] = lane_sum_m256(low[h], high[h]);
                        best[h] = std::max(best[h], sc[h * n + l]);
                      }
                    });
#else
  f32x16 pending[G][kMaxTileSums];
  int count = 0;
  int64_t first = 0;
  const auto reduce = [&] {
    for (int h = 0; h < G; ++h) {
      lane_sums(pending[h], count, sc + h * n + first);
      for (int i = 0; i < count; ++i) best[h] = std::max(best[h], sc[h * n + first + i]);
    }
    first += count;
    count = 0;
  };
  for_each_position(k_cache + kv_head * head_dim, block_table, block_size, token_stride, start,
                    context,
                    [&](int64_t, const T* key, const T* ahead) {
                      prefetch_row(ahead, head_dim);
                      f32x16 sum[G];
                      for (int h = 0; h < G; ++h) sum[h] = f32x16{};
                      for (int64_t i = 0; i < head_dim; i += kLanes) {
                        const f32x16 k = load_as_f32x16(key + i);
                        for (int h = 0; h < G; ++h) {
                          sum[h] = sum[h] + load_f32x16(sq + h * head_dim + i) * k;
                        }
                      }
                      for (int h = 0; h < G; ++h) pending[h][count] = sum[h];
                      if (++count == kMaxTileSums) reduce();
                    });
  if (count > 0) reduce();
#endif
  float total[G];
  for (int h = 0; h < G; ++h) {
    exp_in_place(sc + h * n, best[h], n);
    total[h] = fixed_sum(sc + h * n, n);
  }
  const T* values = v_cache + kv_head * head_dim;
#if defined(SPATE_M256_ATTENTION)
  // 8-lane registers: as many dims at a time as G heads' sums leave registers for.
  constexpr int kChunks = G <= 3 ? 4 : 2;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 8 * kChunks) {
    __m256 sum[G][kChunks];
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < kChunks; ++c) sum[h][c] = _mm256_setzero_ps();
    }
    for_each_position(values + d0, block_table, block_size, token_stride, start, context,
                      [&](int64_t l, const T* value, const T* ahead) {
                        prefetch_row(ahead, 8 * kChunks);
                        __m256 v[kChunks];
                        for (int c = 0; c < kChunks; ++c) v[c] = load_m256(value + 8 * c);
                        for (int h = 0; h < G; ++h) {
                          const __m256 weight = _mm256_set1_ps(sc[h * n + l]);
                          for (int c = 0; c < kChunks; ++c) {
                            sum[h][c] = _mm256_add_ps(sum[h][c], _mm256_mul_ps(weight, v[c]));
                          }
                        }
                      });
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < kChunks; ++c) _mm256_storeu_ps(acc.data() + h * head_dim + d0 + 8 * c, sum[h][c]);
    }
  }
#else
  for (int64_t d0 = 0; d0 < head_dim; d0 += 4 * kLanes) {
    f32x16 sum[G][4];
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < 4; ++c) sum[h][c] = f32x16{};
    }
    for_each_position(values + d0, block_table, block_size, token_stride, start, context,
                      [&](int64_t l, const T* value, const T* ahead) {
                        prefetch_row(ahead, 4 * kLanes);
                        f32x16 v[4];
                        for (int c = 0; c < 4; ++c) v[c] = load_as_f32x16(value + c * kLanes);
                        for (int h = 0; h < G; ++h) {
                          const float weight = sc[h * n + l];
                          for (int c = 0; c < 4; ++c) sum[h][c] = sum[h][c] + weight * v[c];
                        }
                      });
    for (int h = 0; h < G; ++h) std::memcpy(acc.data() + h * head_dim + d0, sum[h], sizeof sum[h]);
  }
#endif
  for (int h = 0; h < G; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      out[h * head_dim + d] = from_float<T>(acc[h * head_dim + d] / total[h]);
    }
  }
}

// `heads` query heads that share KV head `kv_head` (queries and out: `heads` rows of
// head_dim) over positions start <= l < context, each with attend_one's bits: in one pass where attend_group applies, else one
// head at a time.
template <typename T>
inline void attend_heads(const T* queries, int64_t heads, float scale, const T* k_cache,
                         const T* v_cache, const int32_t* block_table, int64_t block_size,
                         int64_t num_kv_heads, int64_t kv_head, int64_t head_dim, int64_t start,
                         int64_t context, std::vector<float>& scores,
                         std::vector<float>& scaled_query, std::vector<float>& acc, T* out) {
  if (context > start && head_dim % (4 * kLanes) == 0 && heads >= 1 && heads <= kMaxGroup) {
#define SPATE_GROUP(G)                                                                          \
  if (heads == G) {                                                                             \
    attend_group<T, G>(queries, scale, k_cache, v_cache, block_table, block_size, num_kv_heads, \
                       kv_head, head_dim, start, context, scores, scaled_query, acc, out);      \
    return;                                                                                     \
  }
    SPATE_GROUP(1) SPATE_GROUP(2) SPATE_GROUP(3) SPATE_GROUP(4)
#undef SPATE_GROUP
  }
  scaled_query.resize(head_dim);
  acc.resize(head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    attend_one(queries + h * head_dim, scale, k_cache, v_cache, block_table, block_size,
               num_kv_heads, kv_head, head_dim, start, context, scores, scaled_query, acc,
               out + h * head_dim);
  }
}

// The first position a query at context - 1 sees: 0, or where its sliding window of
// `window` keys (itself included) begins.
inline int64_t window_start(int64_t context, const c10::optional<int64_t>& window) {
  return window.has_value() ? std::max<int64_t>(context - *window, 0) : 0;
}

inline void check_window(const c10::optional<int64_t>& window) {
  TORCH_CHECK(!window.has_value() || *window >= 1, "sliding_window must be at least 1, got ",
              window.value_or(0));
}

// How many query heads of a KV head one task takes: the whole group where there are
// tasks enough for every thread, else one (a step of one sequence has few KV heads).
inline int64_t heads_per_task(int64_t rows, int64_t num_kv_heads, int64_t group) {
  return rows * num_kv_heads >= 2 * at::get_num_threads() ? group : 1;
}

// The blocks positions start <= l < context of a sequence sit in must exist in the cache
// (those before a sliding window's start may already be back in the pool).
inline void check_blocks(const int32_t* table, int64_t start, int64_t context,
                         int64_t block_size, int64_t num_blocks, int64_t seq) {
  for (int64_t i = start / block_size; i < (context + block_size - 1) / block_size; ++i) {
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
