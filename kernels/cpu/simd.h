// The arithmetic every fused op shares: 16 float lanes in one fixed order, whatever the
// ISA. A sum here adds the same values in the same order on any CPU, batch or thread
// count (the library is built with -ffp-contract=off), which is what makes a row's bits
// its own (docs/reliability.md).

#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // used only under the ISA macros below; other CPUs take plain C++
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace spate_cpu {

constexpr int64_t kLanes = 16;

inline float to_float(float value) { return value; }
inline float to_float(c10::BFloat16 value) { return static_cast<float>(value); }
inline float to_float(c10::Half value) { return static_cast<float>(value); }

template <typename T>
inline T from_float(float value) {
  return static_cast<T>(value);
}

inline float lane_sum(float* acc) {
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

// 16 lanes as one GCC vector: element-wise IEEE operations, whatever the ISA lowers it to.
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

inline f32x16 load_f32x16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
inline f32x16 load_as_f32x16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return load_f32x16(p);
  } else {
    float lanes[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = to_float(p[j]);
    return load_f32x16(lanes);
  }
}

inline float lane_sum(f32x16 v) {
  float lanes[kLanes];
  std::memcpy(lanes, &v, sizeof lanes);
  return lane_sum(lanes);
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// lane_sum of the 16 lanes held as two 8-lane halves (a: 0..7, b: 8..15), with its tree:
// lane j + 8, then + 4, + 2, + 1.
inline float lane_sum_m256(__m256 a, __m256 b) {
  const __m256 eight = _mm256_add_ps(a, b);
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}
#endif

constexpr int kMaxTileSums = 16;  // sums reduced at once (a quantized tile: 8 rows by 2)

// Lane k of add_halves<w>(a, b): the two vectors hold partial sums of 2w lanes each (a's,
// then b's); lane k gets element k % w of partial sum k / w plus element k % w + w.
constexpr int half_lane(int k, int w) { return k / w * 2 * w + k % w; }

template <int W>
inline f32x16 add_halves(f32x16 a, f32x16 b) {
#define SPATE_HALF(k) half_lane(k, W)
#define SPATE_UPPER(k) half_lane(k, W) + W
  return __builtin_shufflevector(a, b, SPATE_HALF(0), SPATE_HALF(1), SPATE_HALF(2),
                                 SPATE_HALF(3), SPATE_HALF(4), SPATE_HALF(5), SPATE_HALF(6),
                                 SPATE_HALF(7), SPATE_HALF(8), SPATE_HALF(9), SPATE_HALF(10),
                                 SPATE_HALF(11), SPATE_HALF(12), SPATE_HALF(13),
                                 SPATE_HALF(14), SPATE_HALF(15)) +
         __builtin_shufflevector(a, b, SPATE_UPPER(0), SPATE_UPPER(1), SPATE_UPPER(2),
                                 SPATE_UPPER(3), SPATE_UPPER(4), SPATE_UPPER(5),
                                 SPATE_UPPER(6), SPATE_UPPER(7), SPATE_UPPER(8),
                                 SPATE_UPPER(9), SPATE_UPPER(10), SPATE_UPPER(11),
                                 SPATE_UPPER(12), SPATE_UPPER(13), SPATE_UPPER(14),
                                 SPATE_UPPER(15));
#undef SPATE_UPPER
#undef SPATE_HALF
}

// One step of lane_sums' tree over count >= 2 vectors: pairs become one vector each; a
// lone result is paired with a zero vector for the next step. The new count.
template <int W>
inline int halve(f32x16* v, int count) {
  for (int i = 0; i < count / 2; ++i) v[i] = add_halves<W>(v[2 * i], v[2 * i + 1]);
  count /= 2;
  if (count == 1) v[1] = f32x16{};
  return std::max(count, 2);
}

// sums[i] = lane_sum(acc[i]) for n <= 16 vectors, with lane_sum's tree
// (lane j adds lane j + w, w = 8, 4, 2, 1), but for all of them at once: each step adds
// two shuffled vectors that hold the halves of two partial sums, so 16 sums take 15
// additions and 30 shuffles, not 16 trips through memory and 240 scalar additions. The
// same additions of the same values: the same bits.
inline void lane_sums(const f32x16* acc, int n, float* sums) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  // GCC shuffles 64-byte vectors through memory where the ISA has no 64-byte registers:
  // there each sum takes the same tree in two 8-lane halves.
  for (int i = 0; i < n; ++i) {
    __m256 halves[2];
    std::memcpy(halves, &acc[i], sizeof halves);
    sums[i] = lane_sum_m256(halves[0], halves[1]);
  }
#else
  f32x16 v[kMaxTileSums];
  int count = 2;  // n rounded up to a power of two, zero vectors after the last
  while (count < n) count *= 2;
  for (int i = 0; i < count; ++i) v[i] = i < n ? acc[i] : f32x16{};
  count = halve<8>(v, count);
  count = halve<4>(v, count);
  halve<2>(v, count);
  const f32x16 total = add_halves<1>(v[0], v[1]);  // sixteen sums, in the order of acc
  // Zero vectors stood in after the last of fewer than 16: the n sums lead, in order.
  float lanes[kLanes];
  std::memcpy(lanes, &total, sizeof lanes);
  for (int i = 0; i < n; ++i) sums[i] = lanes[i];
#endif
}

// sum_i a[i] * b[i] over fixed lanes: the same order for any n, batch or thread. Lane j
// adds the rounded products a[i] * b[i] for i = j mod 16 in order, and lane_sum's tree
// adds the lanes; the vector form only keeps the lanes in a register.
template <typename T>
inline float dot(const float* a, const T* b, int64_t n) {
  f32x16 acc{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = acc + load_f32x16(a + i) * load_as_f32x16(b + i);
  float lanes[kLanes];
  std::memcpy(lanes, &acc, sizeof lanes);
  for (; i < n; ++i) lanes[i % kLanes] += a[i] * to_float(b[i]);
  return lane_sum(lanes);
}

inline float sum_of_squares(const float* a, int64_t n) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[i + j] * a[i + j];
  }
  for (; i < n; ++i) acc[i % kLanes] += a[i] * a[i];
  return lane_sum(acc);
}

// exp(x) within 2 ulp over the float range, branch-free so loops of it vectorize:
// x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, 2^n by the exponent bits.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.33654475f), 88.37626266f);
  float n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// Plain loops over raw arrays, outside any lambda, so the compiler vectorizes them.
inline void exp_in_place(float* __restrict values, float shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) values[i] = exp_approx(values[i] - shift);
}

inline float fixed_sum(const float* __restrict values, int64_t n) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += values[i + j];
  }
  for (; i < n; ++i) acc[i % kLanes] += values[i];
  return lane_sum(acc);
}
// a * b + c, rounded once.
inline f32x16 fma_f32x16(f32x16 a, f32x16 b, f32x16 c) {
#if defined(__AVX512F__)
  __m512 va, vb, vc;
  std::memcpy(&va, &a, sizeof a);
  std::memcpy(&vb, &b, sizeof b);
  std::memcpy(&vc, &c, sizeof c);
  const __m512 r = _mm512_fmadd_ps(va, vb, vc);
  std::memcpy(&c, &r, sizeof c);
#elif defined(__FMA__)
  __m256 va[2], vb[2], vc[2];
  std::memcpy(va, &a, sizeof a);
  std::memcpy(vb, &b, sizeof b);
  std::memcpy(vc, &c, sizeof c);
  vc[0] = _mm256_fmadd_ps(va[0], vb[0], vc[0]);
  vc[1] = _mm256_fmadd_ps(va[1], vb[1], vc[1]);
  std::memcpy(&c, vc, sizeof c);
#else
  for (int j = 0; j < kLanes; ++j) c[j] = std::fma(a[j], b[j], c[j]);
#endif
  return c;
}

// Sixteen bytes widened to int32. Integer to float is exact, so the intrinsics (GCC
// lowers a byte-to-int vector conversion one lane at a time) change no bits, only speed.
inline i32x16 widen_bytes(const uint8_t* bytes, bool is_signed) {
  i32x16 wide;
#if defined(__AVX512F__)
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m512i v = is_signed ? _mm512_cvtepi8_epi32(packed) : _mm512_cvtepu8_epi32(packed);
  std::memcpy(&wide, &v, sizeof wide);
#elif defined(__AVX2__)
  const __m128i first = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  const __m128i second = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8));
  const __m256i halves[2] = {
      is_signed ? _mm256_cvtepi8_epi32(first) : _mm256_cvtepu8_epi32(first),
      is_signed ? _mm256_cvtepi8_epi32(second) : _mm256_cvtepu8_epi32(second)};
  std::memcpy(&wide, halves, sizeof wide);
#else
  for (int j = 0; j < kLanes; ++j) {
    wide[j] = is_signed ? static_cast<int32_t>(static_cast<int8_t>(bytes[j])) : bytes[j];
  }
#endif
  return wide;
}

}  // namespace spate_cpu
