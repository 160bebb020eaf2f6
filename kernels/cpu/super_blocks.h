// llama.cpp's K-quants (Q4_K, Q5_K, Q6_K) as the file stores them: rows of 256-weight
// super-blocks, each with its own scales, decoded 32 weights at a time in registers to
// exactly the float32 weights gguf-py's dequantize gives (one rounding per product, as
// numpy computes them):
//   Q4_K, Q5_K: w = (d * sc[g]) * q - dmin * m[g], q 0..15 or 0..31, 6-bit sc and m;
//   Q6_K:       w = (d * sc[h]) * q, q -32..31, an 8-bit sc per 16 weights h.
// A group of 32 comes out as lo (weights 0..15) and hi (16..31), the halves the 32-weight
// formats' tiles take (quantized_linear.cpp), so a K-quant row is summed in their order.

#pragma once

#include <cstdint>
#include <cstring>

#include "simd.h"

namespace spate_cpu {

constexpr int64_t kSuperBlock = 256;
constexpr int kGroupsPerBlock = 8;  // groups of 32 weights in a super-block

// Bytes of one super-block: Q4_K d, dmin (fp16), 12 bytes of scales and mins, 128 of
// nibbles; Q5_K the same with 32 bytes of high bits before the nibbles; Q6_K 128 bytes of
// low nibbles, 64 of high bit pairs, 16 int8 scales and d.
constexpr int64_t super_block_bytes(int bits) {
  return bits == 4 ? 144 : bits == 5 ? 176 : 210;
}

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

// One super-block's per-group factors: weights 0..15 of group g take lo[g], 16..31 hi[g],
// then (Q4_K, Q5_K) add min[g].
struct BlockScales {
  float lo[kGroupsPerBlock], hi[kGroupsPerBlock], min[kGroupsPerBlock];
};

template <int kBits>
inline void block_scales(const uint8_t* block, BlockScales& out) {
  if constexpr (kBits == 6) {
    const float d = half_at(block + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
    for (int g = 0; g < kGroupsPerBlock; ++g) {
      out.lo[g] = d * static_cast<float>(sc[2 * g]);
      out.hi[g] = d * static_cast<float>(sc[2 * g + 1]);
    }
  } else {
    const float d = half_at(block), dmin = half_at(block + 2);
    const uint8_t* q = block + 4;  // llama.cpp's get_scale_min_k4 layout
    for (int g = 0; g < kGroupsPerBlock; ++g) {
      const int sc = g < 4 ? q[g] & 63 : (q[g + 4] & 15) | ((q[g - 4] >> 6) << 4);
      const int m = g < 4 ? q[g + 4] & 63 : (q[g + 4] >> 4) | ((q[g] >> 6) << 4);
      out.lo[g] = out.hi[g] = d * static_cast<float>(sc);
      out.min[g] = -(dmin * static_cast<float>(m));  // w = D q + (-M) is D q - M
    }
  }
}

// Where group g's codes are: `low` holds its 4 low bits at bit `shift` of bytes 0..31,
// `high` (Q5_K, Q6_K) its upper bits at bit `high_shift`.
struct GroupCodes {
  const uint8_t* low;
  int shift;
  const uint8_t* high;
  int high_shift;
};

template <int kBits>
inline GroupCodes group_codes(const uint8_t* block, int g) {
  if constexpr (kBits == 4) {
    return {block + 16 + 32 * (g / 2), 4 * (g % 2), nullptr, 0};
  } else if constexpr (kBits == 5) {
    return {block + 48 + 32 * (g / 2), 4 * (g % 2), block + 16, g};
  } else {
    // 128 weights per half h: nibbles of bytes 64h..64h+63 (low, then high nibbles), high
    // bit pairs at 2k of bytes 128 + 32h.., k = the group's quarter of the half.
    const int h = g / 4, k = g % 4;
    return {block + 64 * h + 32 * (k % 2), 4 * (k / 2), block + 128 + 32 * h, 2 * k};
  }
}

// The 16 integer codes of weights j..j+15 (j = 0 or 16) of a group.
template <int kBits>
inline i32x16 codes16(const GroupCodes& at, int j) {
  i32x16 q = (widen_bytes(at.low + j, false) >> at.shift) & 15;
  if constexpr (kBits == 5) q = q | (((widen_bytes(at.high + j, false) >> at.high_shift) & 1) << 4);
  if constexpr (kBits == 6) q = (q | (((widen_bytes(at.high + j, false) >> at.high_shift) & 3) << 4)) - 32;
  return q;
}

template <int kBits>
inline void decode_super_group(const uint8_t* block, const BlockScales& s, int g, f32x16& lo,
                               f32x16& hi) {
  const GroupCodes at = group_codes<kBits>(block, g);
  lo = __builtin_convertvector(codes16<kBits>(at, 0), f32x16) * s.lo[g];
  hi = __builtin_convertvector(codes16<kBits>(at, 16), f32x16) * s.hi[g];
  if constexpr (kBits != 6) {
    lo = lo + s.min[g];
    hi = hi + s.min[g];
  }
}

// The next tiles' rows follow this tile's: fetch what they hold of super-block b while
// this one computes (as NextTiles does for the 32-weight formats).
template <int kBits>
inline void fetch_super_block(const uint8_t* ahead, int64_t row_bytes, int cols, int64_t b) {
  constexpr int64_t bytes = super_block_bytes(kBits);
  for (int c = 0; c < cols; ++c) {
    const char* p = reinterpret_cast<const char*>(ahead + c * row_bytes + b * bytes);
    for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(p + line);
  }
}

// sums[r * kCols + c] = <weight row c, x row r>: tile_dots' order, group by group.
template <int kBits, int kRows, int kCols>
inline void super_tile_dots(const uint8_t* rows, int64_t row_bytes, int64_t blocks,
                            const uint8_t* ahead, const float* x, int64_t in_features,
                            float* sums) {
  constexpr int64_t bytes = super_block_bytes(kBits);
  f32x16 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) acc[r][c] = f32x16{};
  }
  for (int64_t b = 0; b < blocks; ++b) {
    fetch_super_block<kBits>(ahead, row_bytes, kCols, b);
    BlockScales scales[kCols];
    for (int c = 0; c < kCols; ++c) block_scales<kBits>(rows + c * row_bytes + b * bytes, scales[c]);
    for (int g = 0; g < kGroupsPerBlock; ++g) {
      f32x16 lo[kCols], hi[kCols];
      for (int c = 0; c < kCols; ++c) {
        decode_super_group<kBits>(rows + c * row_bytes + b * bytes, scales[c], g, lo[c], hi[c]);
      }
      for (int r = 0; r < kRows; ++r) {
        const float* xg = x + r * in_features + b * kSuperBlock + g * 32;
        const f32x16 x_lo = load_f32x16(xg), x_hi = load_f32x16(xg + 16);
        for (int c = 0; c < kCols; ++c) {
          acc[r][c] = fma_f32x16(lo[c], x_lo, acc[r][c]);
          acc[r][c] = fma_f32x16(hi[c], x_hi, acc[r][c]);
        }
      }
    }
  }
  lane_sums(&acc[0][0], kRows * kCols, sums);
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
// The same in AVX2 registers (see tile_dots_avx2): w[0..3] hold weights 0..7, 8..15,
// 16..23, 24..31 of group g, with the same roundings.
template <int kBits>
inline void decode_super_group_avx2(const uint8_t* block, const BlockScales& s, int g,
                                    __m256 w[4]) {
  const GroupCodes at = group_codes<kBits>(block, g);
  const __m256i nibble = _mm256_set1_epi32(15);
  for (int i = 0; i < 4; ++i) {
    const __m128i low = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at.low + 8 * i));
    __m256i q = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(low), at.shift), nibble);
    if constexpr (kBits != 4) {
      const __m128i high = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at.high + 8 * i));
      const __m256i mask = _mm256_set1_epi32(kBits == 5 ? 1 : 3);
      const __m256i top = _mm256_and_si256(
          _mm256_srli_epi32(_mm256_cvtepu8_epi32(high), at.high_shift), mask);
      q = _mm256_or_si256(q, _mm256_slli_epi32(top, 4));
    }
    if constexpr (kBits == 6) q = _mm256_sub_epi32(q, _mm256_set1_epi32(32));
    w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(i < 2 ? s.lo[g] : s.hi[g]));
    if constexpr (kBits != 6) w[i] = _mm256_add_ps(w[i], _mm256_set1_ps(s.min[g]));
  }
}

template <int kBits, int kRows, int kCols>
inline void super_tile_dots_avx2(const uint8_t* rows, int64_t row_bytes, int64_t blocks,
                                 const uint8_t* ahead, const float* x, int64_t in_features,
                                 float* sums) {
  constexpr int64_t bytes = super_block_bytes(kBits);
  __m256 acc[kRows][kCols][2];
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    fetch_super_block<kBits>(ahead, row_bytes, kCols, b);
    for (int c = 0; c < kCols; ++c) {
      const uint8_t* block = rows + c * row_bytes + b * bytes;
      BlockScales scales;
      block_scales<kBits>(block, scales);
      for (int g = 0; g < kGroupsPerBlock; ++g) {
        __m256 w[4];
        decode_super_group_avx2<kBits>(block, scales, g, w);
        for (int r = 0; r < kRows; ++r) {
          const float* xg = x + r * in_features + b * kSuperBlock + g * 32;
          acc[r][c][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xg), acc[r][c][0]);
          acc[r][c][1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xg + 8), acc[r][c][1]);
          acc[r][c][0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xg + 16), acc[r][c][0]);
          acc[r][c][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xg + 24), acc[r][c][1]);
        }
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) sums[r * kCols + c] = lane_sum_m256(acc[r][c][0], acc[r][c][1]);
  }
}
#endif

}  // namespace spate_cpu
