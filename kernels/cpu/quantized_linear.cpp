// Linear layers over a GGUF file's own 4- and 8-bit weights.
//
// weight[n, k] = scale[n, g] * code[n, k] (+ min[n, g]), g = k / 32, read as the file
// stores it: Q4 codes two to a byte (byte j of a group: code j low, code j + 16 high),
// Q8 codes one to a byte; the K-quants (Q4_K, Q5_K, Q6_K) as their 256-weight
// super-blocks with the scales inside (super_blocks.h). Each group is decoded in
// registers to exactly the float32 weights the reference dequantization gives
// (GroupQuantized.dequantize, gguf-py's for the K-quants), and one output value is one
// thread's sum
//   acc[j] = fma(w[k], x[k], acc[j]) over k = 32 g + j and then 32 g + 16 + j, g rising,
// reduced by lane_sum's tree. The row tile only decides how many rows share one
// decoding of a group, so a row's bits depend neither on its batch, nor on the thread
// count, nor on the vector width (16 lanes on any ISA, and a fused multiply-add rounds
// once whether an instruction or std::fma computes it).

#include <algorithm>
#include <cstdint>

#include "chunk_pool.h"
#include "ops.h"
#include "simd.h"
#include "super_blocks.h"

namespace spate_cpu {
namespace {

constexpr int64_t kGroup = 32;
constexpr int64_t kRowBlock = 64;  // output rows whose weights stay in cache across tiles
constexpr int64_t kPrefetchTiles = 2;  // how far ahead weights are fetched (1, 4, 8: slower)

// One group's 32 weights, as dequantize() computes them: lo holds 0..15, hi 16..31.
template <int kBits>
inline void decode_group(const uint8_t* codes, int32_t offset, const float* scale,
                         const float* min, f32x16& lo, f32x16& hi) {
  const float d = *scale;
  const float m = min == nullptr ? 0.0f : *min;
  if constexpr (kBits == 4) {
    const i32x16 wide = widen_bytes(codes, false);
#if defined(__AVX512F__)
    // All 16 values a nibble can stand for, computed as dequantize() does, then each
    // weight picked from them by its nibble (vpermps reads an index's low 4 bits).
    const f32x16 values = __builtin_convertvector(
        i32x16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} - offset, f32x16);
    f32x16 table = values * d;
    if (min != nullptr) table = table + m;
    __m512 t;
    __m512i low, high;
    std::memcpy(&t, &table, sizeof t);
    std::memcpy(&low, &wide, sizeof low);
    high = _mm512_srli_epi32(low, 4);
    const __m512 picked_lo = _mm512_permutexvar_ps(low, t);
    const __m512 picked_hi = _mm512_permutexvar_ps(high, t);
    std::memcpy(&lo, &picked_lo, sizeof lo);
    std::memcpy(&hi, &picked_hi, sizeof hi);
    return;
#else
    lo = __builtin_convertvector((wide & 15) - offset, f32x16);
    hi = __builtin_convertvector((wide >> 4) - offset, f32x16);
#endif
  } else {
    lo = __builtin_convertvector(widen_bytes(codes, true), f32x16);
    hi = __builtin_convertvector(widen_bytes(codes + 16, true), f32x16);
  }
  lo = lo * d;
  hi = hi * d;
  if (min != nullptr) {
    lo = lo + m;
    hi = hi + m;
  }
}

// The next tiles' weight rows follow this tile's in memory: fetch them while this one
// computes, spread over its groups (the hardware prefetcher loses track of this many
// short interleaved streams).
template <int kBits, int kCols>
class NextTiles {
 public:
  NextTiles(const uint8_t* codes, int64_t row_bytes, const float* scales, const float* mins,
            int64_t groups)
      : codes_(reinterpret_cast<const char*>(codes) + kPrefetchTiles * kCols * row_bytes),
        scales_(reinterpret_cast<const char*>(scales + kPrefetchTiles * kCols * groups)),
        mins_(mins == nullptr
                  ? nullptr
                  : reinterpret_cast<const char*>(mins + kPrefetchTiles * kCols * groups)) {}

  // What the next tiles hold of group g.
  void fetch(int64_t g) const {
    constexpr int64_t group_bytes = kGroup * kBits / 8;
    for (int64_t line = 0; line < kCols * group_bytes; line += 64) {
      __builtin_prefetch(codes_ + g * kCols * group_bytes + line);
    }
    __builtin_prefetch(scales_ + g * kCols * sizeof(float));
    if (mins_ != nullptr) __builtin_prefetch(mins_ + g * kCols * sizeof(float));
  }

 private:
  const char* codes_;
  const char* scales_;
  const char* mins_;
};

// sums[r * kCols + c] = <weight row c, x row r> for kRows rows of x and kCols weight rows
// (a tile of independent sums, so that no one chain of multiply-adds sets the pace).
template <int kBits, int kRows, int kCols>
inline void tile_dots(const uint8_t* codes, int64_t row_bytes, const float* scales,
                      const float* mins, int64_t groups, int32_t offset, const float* x,
                      int64_t in_features, float* sums) {
  constexpr int64_t group_bytes = kGroup * kBits / 8;
  f32x16 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) acc[r][c] = f32x16{};
  }
  const NextTiles<kBits, kCols> next(codes, row_bytes, scales, mins, groups);
  for (int64_t g = 0; g < groups; ++g) {
    next.fetch(g);
    f32x16 lo[kCols], hi[kCols];
    for (int c = 0; c < kCols; ++c) {
      decode_group<kBits>(codes + c * row_bytes + g * group_bytes, offset,
                             scales + c * groups + g,
                             mins == nullptr ? nullptr : mins + c * groups + g, lo[c], hi[c]);
    }
    for (int r = 0; r < kRows; ++r) {
      const float* xg = x + r * in_features + g * kGroup;
      const f32x16 x_lo = load_f32x16(xg), x_hi = load_f32x16(xg + 16);
      for (int c = 0; c < kCols; ++c) {
        acc[r][c] = fma_f32x16(lo[c], x_lo, acc[r][c]);
        acc[r][c] = fma_f32x16(hi[c], x_hi, acc[r][c]);
      }
    }
  }
  lane_sums(&acc[0][0], kRows * kCols, sums);
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
// The same tile in AVX2 registers. GCC keeps a 64-byte vector in memory where the ISA has
// no 64-byte registers, so tile_dots there ran at a fiftieth of this speed. Here each
// 16-lane value is two __m256 (lanes 0..7, 8..15) and x is read from memory by the
// multiply-adds: the same weights (convert, multiply by the scale, add the min, one
// rounding each), the same fused multiply-adds in the same order into the same lanes, and
// lane_sum's tree (lane j + 8, then + 4, + 2, + 1), so the same bits as every other build
// (tests/kernels/test_cpu_ops.py). The tiles differ from tile_dots' (16 registers, not
// 32): they decide only how many rows share a decoded group.
#define SPATE_AVX2_TILES 1

// One group's 32 weights: w[0], w[1] hold 0..7, 8..15 (lo) and w[2], w[3] 16..23, 24..31.
template <int kBits>
inline void decode_group_avx2(const uint8_t* codes, __m256i offset, __m256 scale,
                              const float* min, __m256 w[4]) {
  __m256i q[4];
  if constexpr (kBits == 4) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m256i first = _mm256_cvtepu8_epi32(packed);
    const __m256i second = _mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8));
    const __m256i nibble = _mm256_set1_epi32(15);
    q[0] = _mm256_and_si256(first, nibble);
    q[1] = _mm256_and_si256(second, nibble);
    q[2] = _mm256_srli_epi32(first, 4);
    q[3] = _mm256_srli_epi32(second, 4);
    for (int i = 0; i < 4; ++i) q[i] = _mm256_sub_epi32(q[i], offset);
  } else {
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * i)));
    }
  }
  for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(q[i]), scale);
  if (min != nullptr) {
    const __m256 m = _mm256_set1_ps(*min);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_add_ps(w[i], m);
  }
}

template <int kBits, int kRows, int kCols>
inline void tile_dots_avx2(const uint8_t* codes, int64_t row_bytes, const float* scales,
                           const float* mins, int64_t groups, int32_t offset, const float* x,
                           int64_t in_features, float* sums) {
  constexpr int64_t group_bytes = kGroup * kBits / 8;
  __m256 acc[kRows][kCols][2];
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  }
  const __m256i offset_v = _mm256_set1_epi32(offset);
  const NextTiles<kBits, kCols> next(codes, row_bytes, scales, mins, groups);
  for (int64_t g = 0; g < groups; ++g) {
    next.fetch(g);
    for (int c = 0; c < kCols; ++c) {
      __m256 w[4];
      decode_group_avx2<kBits>(codes + c * row_bytes + g * group_bytes, offset_v,
                               _mm256_set1_ps(scales[c * groups + g]),
                               mins == nullptr ? nullptr : mins + c * groups + g, w);
      for (int r = 0; r < kRows; ++r) {
        const float* xg = x + r * in_features + g * kGroup;
        acc[r][c][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xg), acc[r][c][0]);
        acc[r][c][1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xg + 8), acc[r][c][1]);
        acc[r][c][0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xg + 16), acc[r][c][0]);
        acc[r][c][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xg + 24), acc[r][c][1]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) sums[r * kCols + c] = lane_sum_m256(acc[r][c][0], acc[r][c][1]);
  }
}
#endif

// The 32-weight formats' tiles (Q4_0, Q4_1, Q8_0) from weight row n on.
template <int kBits>
struct GroupTiles {
  const uint8_t* codes;
  const float* scales;
  const float* mins;
  int64_t groups;
  int32_t offset;

  template <int kRows, int kCols>
  void dots(int64_t n, const float* x, int64_t in_features, float* sums) const {
    const int64_t bytes = groups * kGroup * kBits / 8;
    const uint8_t* c = codes + n * bytes;
    const float* sc = scales + n * groups;
    const float* mn = mins == nullptr ? nullptr : mins + n * groups;
#if defined(SPATE_AVX2_TILES)
    tile_dots_avx2<kBits, kRows, kCols>(c, bytes, sc, mn, groups, offset, x, in_features, sums);
#else
    tile_dots<kBits, kRows, kCols>(c, bytes, sc, mn, groups, offset, x, in_features, sums);
#endif
  }
};

// The K-quants' tiles (super_blocks.h) from weight row n on.
template <int kBits>
struct SuperBlockTiles {
  const uint8_t* rows;
  int64_t blocks;

  template <int kRows, int kCols>
  void dots(int64_t n, const float* x, int64_t in_features, float* sums) const {
    const int64_t row_bytes = blocks * super_block_bytes(kBits);
    const uint8_t* first = rows + n * row_bytes;
    const uint8_t* ahead = first + kPrefetchTiles * kCols * row_bytes;
#if defined(SPATE_AVX2_TILES)
    super_tile_dots_avx2<kBits, kRows, kCols>(first, row_bytes, blocks, ahead, x, in_features,
                                              sums);
#else
    super_tile_dots<kBits, kRows, kCols>(first, row_bytes, blocks, ahead, x, in_features, sums);
#endif
  }
};

template <class Tiles>
void quantized_rows(const Tiles& tiles, const float* x, int64_t rows, int64_t in_features,
                    int64_t out_features, float* out) {
  // A row or two stream the weights from memory and take shrinking chunks of whole row
  // blocks (the first a quarter of the rows on two threads): long streams for the
  // prefetches, yet a thread the OS takes away for a while leaves its rest to the others.
  // One share a thread, which a served worker at one stream had to wait for each time
  // the API or NATS took a core, streamed 0.74x the tokens/s (AVX2, 2 cores). More rows
  // are compute-bound and take smaller chunks.
  const int64_t grain = rows <= 2 ? kRowBlock : 16;
  dealt_parallel_for(0, out_features, grain, [&](int64_t begin, int64_t end) {
    float sums[kMaxTileSums];
    for (int64_t block = begin; block < end; block += kRowBlock) {
      const int64_t block_end = std::min(end, block + kRowBlock);
      for (int64_t m = 0; m < rows;) {
        // Tiles of 8, 4, 2 or 1 rows of x; one or two rows of x pair with four weight
        // rows, more with two: each decoded group serves as many multiply-adds as the
        // registers hold.
        const int64_t left = rows - m;
#if defined(SPATE_AVX2_TILES)
        // Up to 8 rows share each decoded group (decoding is most of a group's work
        // here: a draft's rows cost a decode step little).
        const int tile_rows = static_cast<int>(std::min<int64_t>(left, 8));
        const int wide = tile_rows == 1 ? 4 : tile_rows <= 3 ? 2 : 1;
#else
        const int tile_rows = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const int wide = tile_rows <= 2 ? 4 : 2;
#endif
        for (int64_t n = block; n < block_end;) {
          const int cols = block_end - n >= wide ? wide : 1;
          const float* xm = x + m * in_features;
#define SPATE_TILE(R, C) \
  if (tile_rows == R && cols == C) tiles.template dots<R, C>(n, xm, in_features, sums);
#if defined(SPATE_AVX2_TILES)
          SPATE_TILE(1, 4) SPATE_TILE(1, 1)
          SPATE_TILE(2, 2) SPATE_TILE(2, 1)
          SPATE_TILE(3, 2) SPATE_TILE(3, 1)
          SPATE_TILE(4, 1) SPATE_TILE(5, 1) SPATE_TILE(6, 1) SPATE_TILE(7, 1) SPATE_TILE(8, 1)
#else
          SPATE_TILE(1, 4) SPATE_TILE(1, 1)
          SPATE_TILE(2, 4) SPATE_TILE(2, 1)
          SPATE_TILE(4, 2) SPATE_TILE(4, 1)
          SPATE_TILE(8, 2) SPATE_TILE(8, 1)
#endif
#undef SPATE_TILE
          for (int r = 0; r < tile_rows; ++r) {
            for (int j = 0; j < cols; ++j) out[(m + r) * out_features + n + j] = sums[r * cols + j];
          }
          n += cols;
        }
        m += tile_rows;
      }
    }
  });
}

}  // namespace

namespace {

// Q4_K, Q5_K, Q6_K: codes are [N, K / 256 * block bytes], the file's super-blocks.
void super_block_linear(const at::Tensor& x, const at::Tensor& codes, int64_t bits,
                        int64_t offset, at::Tensor& out) {
  TORCH_CHECK(offset == (bits == 6 ? 32 : 0), "a ", bits, "-bit K-quant stores codes at offset ",
              bits == 6 ? 32 : 0, ", got ", offset);
  const int64_t in_features = x.size(1), blocks = in_features / kSuperBlock;
  TORCH_CHECK(in_features % kSuperBlock == 0, "K = ", in_features,
              " is not a multiple of the K-quants' ", kSuperBlock);
  TORCH_CHECK(codes.size(1) == blocks * super_block_bytes(static_cast<int>(bits)), "codes hold ",
              codes.size(1), " bytes per row, K = ", in_features, " in ", bits,
              "-bit super-blocks needs ", blocks * super_block_bytes(static_cast<int>(bits)));
  const uint8_t* rows = static_cast<const uint8_t*>(codes.data_ptr());
  const float* xs = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t m = x.size(0), n = codes.size(0);
  if (m == 0 || n == 0) return;
  if (bits == 4) {
    quantized_rows(SuperBlockTiles<4>{rows, blocks}, xs, m, in_features, n, o);
  } else if (bits == 5) {
    quantized_rows(SuperBlockTiles<5>{rows, blocks}, xs, m, in_features, n, o);
  } else {
    quantized_rows(SuperBlockTiles<6>{rows, blocks}, xs, m, in_features, n, o);
  }
}

// Q4_0, Q4_1, Q8_0: codes [N, K * bits / 8], scales (and mins) [N, K / 32].
void group_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                  const c10::optional<at::Tensor>& mins, int64_t bits, int64_t offset,
                  at::Tensor& out) {
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8 with scales, got ", bits);
  const int64_t in_features = x.size(1), out_features = codes.size(0);
  TORCH_CHECK(in_features % kGroup == 0, "K = ", in_features, " is not a multiple of ", kGroup);
  TORCH_CHECK(codes.size(1) * 8 == in_features * bits, "codes hold ", codes.size(1),
              " bytes per row, K = ", in_features, " at ", bits, " bits needs ",
              in_features * bits / 8);
  const int64_t groups = in_features / kGroup;
  TORCH_CHECK(scales.size(0) == out_features && scales.size(1) == groups,
              "scales must be a contiguous [N, K / 32] tensor");
  const at::Tensor* min_tensor = nullptr;
  if (mins.has_value() && mins->defined()) {
    check_cpu(*mins, "mins");
    TORCH_CHECK(mins->sizes() == scales.sizes() && mins->scalar_type() == scales.scalar_type() &&
                    mins->is_contiguous(),
                "mins must be contiguous and match scales in shape and dtype");
    min_tensor = &*mins;
  }
  const uint8_t* code_bytes = static_cast<const uint8_t*>(codes.data_ptr());
  const int32_t code_offset = static_cast<int32_t>(offset);
  const float* scale_data = scales.data_ptr<float>();
  const float* min_data = min_tensor == nullptr ? nullptr : min_tensor->data_ptr<float>();
  const float* xs = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t m = x.size(0);
  if (m == 0 || out_features == 0) return;
  if (bits == 4) {
    quantized_rows(GroupTiles<4>{code_bytes, scale_data, min_data, groups, code_offset}, xs, m,
                   in_features, out_features, o);
  } else {
    quantized_rows(GroupTiles<8>{code_bytes, scale_data, min_data, groups, code_offset}, xs, m,
                   in_features, out_features, o);
  }
}

}  // namespace

// x [M, K] float32 times the quantized weight [N, K] transposed: [M, N] float32.
// codes: [N, K / 2] uint8 (bits 4, stored code = value + offset) or [N, K] int8 (bits 8),
// with scales and mins (Q4_1 only) [N, K / 32] float32; or, where scales has no columns,
// the K-quants' super-blocks as the file stores them (bits 4, 5, 6: Q4_K, Q5_K, Q6_K;
// offset 0, 0, 32).
at::Tensor quantized_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                            const c10::optional<at::Tensor>& mins, int64_t bits, int64_t offset) {
  const PoolScope on_the_pool;
  check_cpu(x, "x");
  check_cpu(codes, "codes");
  check_cpu(scales, "scales");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "x must be a contiguous [M, K] float32 tensor");
  TORCH_CHECK(codes.dim() == 2 && codes.is_contiguous() && codes.element_size() == 1,
              "codes must be a contiguous [N, bytes per row] tensor of bytes");
  TORCH_CHECK(scales.dim() == 2 && scales.size(0) == codes.size(0),
              "scales must be a contiguous [N, K / 32] tensor, or [N, 0] for super-blocks");
  TORCH_CHECK(scales.scalar_type() == at::kFloat, "scales must be float32");
  const bool super_blocks = scales.size(1) == 0;
  TORCH_CHECK(!super_blocks || (bits >= 4 && bits <= 6),
              "K-quant super-blocks (scales [N, 0]) have bits 4, 5 or 6, got ", bits);
  TORCH_CHECK(!super_blocks || !(mins.has_value() && mins->defined()),
              "K-quant super-blocks hold their own mins: mins must be None");
  at::Tensor out = at::empty({x.size(0), codes.size(0)}, x.options());
  if (super_blocks) {
    super_block_linear(x, codes, bits, offset, out);
  } else {
    group_linear(x, codes, scales, mins, bits, offset, out);
  }
  return out;
}

}  // namespace spate_cpu
