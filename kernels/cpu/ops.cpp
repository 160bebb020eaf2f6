// The CPU path's fused ops: one call per op and layer where the torch references take
// five to twenty (each an ATen dispatch of a few microseconds, which at one decode row
// cost more than the arithmetic). Built at first use by kernels/cpu_ops.py.
//
// Every value a row produces is computed by one thread, in one fixed order, from that
// row's own inputs: a sequence's bits never depend on its batch, on the thread count or
// on the instruction set (sums run over 16 fixed lanes; built with -ffp-contract=off).
// Prefill attention runs each query through decode attention's routine, so a prefilled
// token gets the bits a decode step would have given it (docs/reliability.md).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // used only under the ISA macros below; other CPUs take plain C++
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;

inline float to_float(float value) { return value; }
inline float to_float(at::BFloat16 value) { return static_cast<float>(value); }
inline float to_float(at::Half value) { return static_cast<float>(value); }

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
void exp_in_place(float* __restrict values, float shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) values[i] = exp_approx(values[i] - shift);
}

float fixed_sum(const float* __restrict values, int64_t n) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += values[i + j];
  }
  for (; i < n; ++i) acc[i % kLanes] += values[i];
  return lane_sum(acc);
}

template <typename T>
void silu_and_mul_row(const T* __restrict row, T* __restrict out, float* __restrict gate,
                      int64_t half) {
  for (int64_t i = 0; i < half; ++i) gate[i] = -to_float(row[i]);
  exp_in_place(gate, 0.0f, half);  // exp(-g)
  for (int64_t i = 0; i < half; ++i) {
    const float g = to_float(row[i]);
    out[i] = from_float<T>(g / (1.0f + gate[i]) * to_float(row[half + i]));
  }
}

template <typename T>
void accumulate(float* __restrict acc, float weight, const T* __restrict value, int64_t n) {
  for (int64_t d = 0; d < n; ++d) acc[d] += weight * to_float(value[d]);
}

// Takes the next chunk of a loop whose next item is `next`: half of an even share of
// what is left (whole multiples of `grain`, at least one), so the chunks shrink toward the
// end and the threads finish together. False when nothing is left.
inline bool next_chunk(std::atomic<int64_t>& next, int64_t end, int64_t grain, int64_t team,
                       int64_t& start, int64_t& stop) {
  start = next.load();
  while (start < end) {
    const int64_t share = (end - start) / (2 * team) / grain * grain;
    const int64_t size = std::max(grain, share);
    if (next.compare_exchange_weak(start, start + size)) {
      stop = std::min(end, start + size);
      return true;
    }
  }
  return false;
}

// The fused ops' threads: the caller and up to at::get_num_threads() - 1 helpers take
// chunks of a loop from a shared counter, and the caller returns as soon as every chunk
// is done. OpenMP's parallel regions (at::parallel_for) end in a barrier that waits for
// every thread of the team, so on a served worker, which shares its cores with the API and
// NATS, a thread the OS took away held up each op until it ran again; here a helper that
// comes late finds the loop done and the op has not waited for it. Which thread computes
// a chunk changes none of its bits.
class ChunkPool {
 public:
  static ChunkPool& instance() {
    static ChunkPool* pool = new ChunkPool();  // never destroyed: its threads outlive exit
    return *pool;
  }

  // f(chunk_begin, chunk_end) for every chunk of [begin, end), on `threads` threads.
  template <typename F>
  void run(int64_t begin, int64_t end, int64_t grain, int64_t threads, const F& f) {
    if (end - begin <= grain || threads <= 1 || in_chunk_) {
      for (int64_t start = begin; start < end; start += grain) f(start, std::min(end, start + grain));
      return;
    }
    std::lock_guard<std::mutex> caller(caller_lock_);  // one loop at a time
    ensure_helpers(threads - 1);
    auto call = [](const void* fn, int64_t b, int64_t e) { (*static_cast<const F*>(fn))(b, e); };
    fn_ = &f;
    call_ = call;
    end_ = end;
    grain_ = grain;
    team_ = threads;
    wanted_ = threads - 1;
    next_.store(begin);
    open_.store(true);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(wake_lock_);
      wake_.notify_all();
    }
    take_chunks();
    open_.store(false);
    while (active_.load() > 0) cpu_relax();
  }

 private:
  static inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  void take_chunks() {
    in_chunk_ = true;
    int64_t start = 0, stop = 0;
    while (next_chunk(next_, end_, grain_, team_, start, stop)) call_(fn_, start, stop);
    in_chunk_ = false;
  }

  // Called before the loop's generation is announced: a new helper waits for the next one.
  void ensure_helpers(int64_t count) {
    while (static_cast<int64_t>(helpers_) < count) {
      const int64_t index = helpers_++;
      const uint64_t seen = generation_.load();
      std::thread([this, index, seen] { helper(index, seen); }).detach();
    }
  }

  void helper(int64_t index, uint64_t seen) {
    while (true) {
      // Spin a little (the next op usually follows within microseconds), then sleep.
      uint64_t now = generation_.load();
      for (int spin = 0; now == seen && spin < kSpins; ++spin) {
        cpu_relax();
        now = generation_.load();
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(wake_lock_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        now = generation_.load();
      }
      seen = now;
      if (index >= wanted_) continue;  // this loop asked for fewer threads
      active_.fetch_add(1);
      if (open_.load() && generation_.load() == seen) {
        take_chunks();
      }
      active_.fetch_sub(1);
    }
  }

  // Pause instructions before a helper sleeps: tens of microseconds to about a
  // millisecond, by CPU; longer than the gaps between the ops of one step.
  static constexpr int kSpins = 20000;
  static thread_local bool in_chunk_;
  std::mutex caller_lock_, wake_lock_;
  std::condition_variable wake_;
  size_t helpers_ = 0;
  const void* fn_ = nullptr;
  void (*call_)(const void*, int64_t, int64_t) = nullptr;
  int64_t end_ = 0, grain_ = 1, team_ = 1;
  std::atomic<int64_t> wanted_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<bool> open_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> active_{0}, sleepers_{0};
};

thread_local bool ChunkPool::in_chunk_ = false;

// Whether this thread's ops run on ChunkPool (PoolScope) or on torch's OpenMP threads.
// The pool serves the ops that follow one another with no torch op between them (the
// decoder layers in one call, a quantized linear); an op between torch's own (the bf16
// path's attention between oneDNN linears) stays on OpenMP, where two pools' threads
// would wait for work in turn on the same cores.
thread_local bool pool_scope = false;

struct PoolScope {
  bool before = pool_scope;
  PoolScope() { pool_scope = true; }
  ~PoolScope() { pool_scope = before; }
};

// Every chunk of `grain` items of [begin, end) through f, on the threads torch is given
// (at::get_num_threads()), dealt out from a shared counter.
template <typename F>
void dealt_parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  grain = std::max<int64_t>(grain, 1);
  if (pool_scope) {
    ChunkPool::instance().run(begin, end, grain, at::get_num_threads(), f);
    return;
  }
  if (end - begin <= grain) {
    if (begin < end) f(begin, end);
    return;
  }
  std::atomic<int64_t> next{begin};
  const int64_t team = std::min<int64_t>((end - begin + grain - 1) / grain, at::get_num_threads());
  at::parallel_for(0, team, 1, [&](int64_t, int64_t) {
    int64_t start = 0, stop = 0;
    while (next_chunk(next, end, grain, team, start, stop)) f(start, stop);
  });
}

void check_cpu(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// ---- RMSNorm, optionally after adding the residual (kept in fp32) ----

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

// ---- silu(gate) * up ----

at::Tensor silu_and_mul(const at::Tensor& x) {
  check_cpu(x, "x");
  const int64_t width = x.size(-1);
  TORCH_CHECK(width % 2 == 0, "x's last dim must be even (gate and up halves), got ", width);
  const int64_t half = width / 2;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = half;
  at::Tensor out = at::empty(shape, x.options());
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "silu_and_mul", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    dealt_parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
      std::vector<float> gate(half);
      for (int64_t r = begin; r < end; ++r) {
        silu_and_mul_row(in + r * width, o + r * half, gate.data(), half);
      }
    });
  });
  return out;
}

// ---- neox rotary embedding of q and k, in place ----

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

// ---- this step's keys and values into their cache slots ----

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

// ---- attention over the paged cache ----

// One query row over the first `context` cached positions of a sequence, for one KV head.
// scores and the output accumulator are the caller's scratch.
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

template <typename T>
void attend_one(const T* query, float scale, const T* k_cache, const T* v_cache,
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
void check_blocks(const int32_t* table, int64_t context, int64_t block_size, int64_t num_blocks,
                  int64_t seq) {
  for (int64_t i = 0; i < (context + block_size - 1) / block_size; ++i) {
    TORCH_CHECK(table[i] >= 0 && table[i] < num_blocks, "block table entry ", i, " of row ", seq,
                " is ", table[i], ", not one of the cache's ", num_blocks, " blocks");
  }
}

void check_paged(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
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

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, double scale) {
  check_paged(q, k_cache, v_cache, block_tables, context_lens);
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
    check_blocks(block_tables.data_ptr<int32_t>() + b * table_width, lengths[b], block_size,
                 k_cache.size(0), b);
  }
  at::Tensor out = at::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode_attention", [&] {
    const scalar_t* queries = q.data_ptr<scalar_t>();
    const scalar_t* keys = k_cache.data_ptr<scalar_t>();
    const scalar_t* values = v_cache.data_ptr<scalar_t>();
    const int32_t* tables = block_tables.data_ptr<int32_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    dealt_parallel_for(0, batch * num_heads, 4, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores, scaled_query, acc;
      scaled_query.resize(head_dim);
      acc.resize(head_dim);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / num_heads, head = task % num_heads;
        attend_one(queries + task * head_dim, static_cast<float>(scale), keys, values,
                   tables + b * table_width, block_size, num_kv_heads, head / group, head_dim,
                   lengths[b], scores, scaled_query, acc, o + task * head_dim);
      }
    });
  });
  return out;
}

at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const at::Tensor& block_tables,
                             const at::Tensor& cu_seqlens_q, const at::Tensor& context_lens,
                             double scale) {
  check_paged(q, k_cache, v_cache, block_tables, context_lens);
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
    check_blocks(block_tables.data_ptr<int32_t>() + s * table_width, lengths[s], block_size,
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
    dealt_parallel_for(0, tokens * num_heads, 4, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores, scaled_query, acc;
      scaled_query.resize(head_dim);
      acc.resize(head_dim);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t t = task / num_heads, head = task % num_heads;
        attend_one(queries + task * head_dim, static_cast<float>(scale), keys, values,
                   tables + row_seq[t] * table_width, block_size, num_kv_heads, head / group,
                   head_dim, row_context[t], scores, scaled_query, acc, o + task * head_dim);
      }
    });
  });
  return out;
}

// ---- Linear layers over a GGUF file's own 4- and 8-bit weights ----
//
// weight[n, k] = scale[n, g] * code[n, k] (+ min[n, g]), g = k / 32, read as the file
// stores it: Q4 codes two to a byte (byte j of a group: code j low, code j + 16 high),
// Q8 codes one to a byte. Each group is decoded in registers to exactly the float32
// weights GroupQuantized.dequantize gives, and one output value is one thread's sum
//   acc[j] = fma(w[k], x[k], acc[j]) over k = 32 g + j and then 32 g + 16 + j, g rising,
// reduced by lane_sum's tree. The row tile only decides how many rows share one
// decoding of a group, so a row's bits depend neither on its batch, nor on the thread
// count, nor on the vector width (16 lanes on any ISA, and a fused multiply-add rounds
// once whether an instruction or std::fma computes it).

constexpr int64_t kGroup = 32;
constexpr int64_t kRowBlock = 64;  // output rows whose weights stay in cache across tiles
constexpr int64_t kPrefetchTiles = 2;  // how far ahead weights are fetched (1, 4, 8: slower)

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
  // The next tiles' weight rows follow this tile's in memory: fetch them while this one
  // computes, spread over its groups (the hardware prefetcher loses track of this many
  // short interleaved streams).
  const int64_t tile_bytes = kCols * row_bytes;
  const char* next_codes = reinterpret_cast<const char*>(codes) + kPrefetchTiles * tile_bytes;
  const char* next_scales = reinterpret_cast<const char*>(scales + kPrefetchTiles * kCols * groups);
  const char* next_mins =
      mins == nullptr ? nullptr : reinterpret_cast<const char*>(mins + kPrefetchTiles * kCols * groups);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t line = 0; line < kCols * group_bytes; line += 64) {
      __builtin_prefetch(next_codes + g * kCols * group_bytes + line);
    }
    __builtin_prefetch(next_scales + g * kCols * sizeof(float));
    if (next_mins != nullptr) __builtin_prefetch(next_mins + g * kCols * sizeof(float));
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

template <int kBits>
void quantized_rows(const float* x, const uint8_t* codes, const float* scales, const float* mins,
                    int32_t offset, int64_t rows, int64_t in_features, int64_t out_features,
                    float* out) {
  const int64_t groups = in_features / kGroup;
  const int64_t row_bytes = in_features * kBits / 8;
  // A row or two stream the weights from memory: one share a thread keeps each stream
  // long for the prefetches (smaller chunks measured slower). More rows are compute-bound
  // and take shrinking chunks.
  const int64_t threads = at::get_num_threads();
  const int64_t grain = rows <= 2 ? (out_features + threads - 1) / threads : 16;
  dealt_parallel_for(0, out_features, grain, [&](int64_t begin, int64_t end) {
    float sums[kMaxTileSums];
    for (int64_t block = begin; block < end; block += kRowBlock) {
      const int64_t block_end = std::min(end, block + kRowBlock);
      for (int64_t m = 0; m < rows;) {
        // Tiles of 8, 4, 2 or 1 rows of x; one or two rows of x pair with four weight
        // rows, more with two: each decoded group serves as many multiply-adds as the
        // registers hold.
        const int64_t left = rows - m;
        const int tile_rows = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const int wide = tile_rows <= 2 ? 4 : 2;
        for (int64_t n = block; n < block_end;) {
          const int cols = block_end - n >= wide ? wide : 1;
          const uint8_t* c = codes + n * row_bytes;
          const float* sc = scales + n * groups;
          const float* mn = mins == nullptr ? nullptr : mins + n * groups;
          const float* xm = x + m * in_features;
#define SPATE_TILE(R, C)                                                                   \
  if (tile_rows == R && cols == C) {                                                       \
    tile_dots<kBits, R, C>(c, row_bytes, sc, mn, groups, offset, xm, in_features, sums); \
  }
          SPATE_TILE(1, 4) SPATE_TILE(1, 1)
          SPATE_TILE(2, 4) SPATE_TILE(2, 1)
          SPATE_TILE(4, 2) SPATE_TILE(4, 1)
          SPATE_TILE(8, 2) SPATE_TILE(8, 1)
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

// x [M, K] float32 times the quantized weight [N, K] transposed: [M, N] float32.
// codes: [N, K / 2] uint8 (bits 4, stored code = value + offset) or [N, K] int8 (bits 8);
// scales and mins (Q4_1 only): [N, K / 32] float32.
at::Tensor quantized_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                            const c10::optional<at::Tensor>& mins, int64_t bits, int64_t offset) {
  const PoolScope on_the_pool;
  check_cpu(x, "x");
  check_cpu(codes, "codes");
  check_cpu(scales, "scales");
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8, got ", bits);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "x must be a contiguous [M, K] float32 tensor");
  TORCH_CHECK(codes.dim() == 2 && codes.is_contiguous() && codes.element_size() == 1,
              "codes must be a contiguous [N, K * bits / 8] tensor of bytes");
  const int64_t rows = x.size(0), in_features = x.size(1), out_features = codes.size(0);
  TORCH_CHECK(in_features % kGroup == 0, "K = ", in_features, " is not a multiple of ", kGroup);
  TORCH_CHECK(codes.size(1) * 8 == in_features * bits, "codes hold ", codes.size(1),
              " bytes per row, K = ", in_features, " at ", bits, " bits needs ",
              in_features * bits / 8);
  const int64_t groups = in_features / kGroup;
  TORCH_CHECK(scales.dim() == 2 && scales.is_contiguous() && scales.size(0) == out_features &&
                  scales.size(1) == groups,
              "scales must be a contiguous [N, K / 32] tensor");
  TORCH_CHECK(scales.scalar_type() == at::kFloat, "scales must be float32");
  const at::Tensor* min_tensor = nullptr;
  if (mins.has_value() && mins->defined()) {
    check_cpu(*mins, "mins");
    TORCH_CHECK(mins->sizes() == scales.sizes() && mins->scalar_type() == scales.scalar_type() &&
                    mins->is_contiguous(),
                "mins must be contiguous and match scales in shape and dtype");
    min_tensor = &*mins;
  }
  at::Tensor out = at::empty({rows, out_features}, x.options());
  if (rows == 0 || out_features == 0) return out;
  const uint8_t* code_bytes = static_cast<const uint8_t*>(codes.data_ptr());
  const int32_t code_offset = static_cast<int32_t>(offset);
  const float* scale_data = scales.data_ptr<float>();
  const float* min_data = min_tensor == nullptr ? nullptr : min_tensor->data_ptr<float>();
  if (bits == 4) {
    quantized_rows<4>(x.data_ptr<float>(), code_bytes, scale_data, min_data, code_offset,
                             rows, in_features, out_features, out.data_ptr<float>());
  } else {
    quantized_rows<8>(x.data_ptr<float>(), code_bytes, scale_data, min_data, code_offset,
                             rows, in_features, out_features, out.data_ptr<float>());
  }
  return out;
}

// ---- a stack of Llama decoder layers in one call ----

// Per layer, in this order: input norm weight; qkv codes, scales, mins; o codes, scales,
// mins; post-attention norm weight; gate_up codes, scales, mins; down codes, scales, mins.
// An empty mins tensor stands for none (Q4_0, Q8_0).
constexpr int64_t kLayerTensors = 14;
// Per layer: bits and code offset of qkv, o, gate_up and down.
constexpr int64_t kLayerQuant = 8;

c10::optional<at::Tensor> mins_of(const at::Tensor& mins) {
  return mins.numel() == 0 ? c10::nullopt : c10::optional<at::Tensor>(mins);
}

// What workers/model/llama.py's modules compute over these ops, call for call and in the
// same order, so the bits are theirs (tests/kernels/test_cpu_ops.py); it saves the
// Python and dispatch of about ten calls a layer, which at one decode row cost as much
// as the attention. Returns (hidden, residual) before the final norm. A prefill passes
// cu_seqlens_q; a decode step passes none.
std::tuple<at::Tensor, at::Tensor> decoder_layers(
    const at::Tensor& embedded, const at::Tensor& positions, const at::Tensor& slot_mapping,
    const at::Tensor& block_tables, const at::Tensor& context_lens,
    const c10::optional<at::Tensor>& cu_seqlens_q, const at::Tensor& cos_sin_cache,
    at::TensorList k_caches, at::TensorList v_caches, at::TensorList weights,
    at::IntArrayRef quant, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
    double scale) {
  const PoolScope on_the_pool;
  const int64_t layers = static_cast<int64_t>(k_caches.size());
  TORCH_CHECK(static_cast<int64_t>(v_caches.size()) == layers, "one v cache per k cache");
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == layers * kLayerTensors,
              "need ", kLayerTensors, " weight tensors a layer, got ", weights.size(), " for ",
              layers, " layers");
  TORCH_CHECK(static_cast<int64_t>(quant.size()) == layers * kLayerQuant,
              "need ", kLayerQuant, " quantization numbers a layer");
  TORCH_CHECK(embedded.dim() == 2 && embedded.scalar_type() == at::kFloat,
              "hidden states must be [T, H] float32");
  const int64_t tokens = embedded.size(0);
  const int64_t q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
  const at::Tensor blocks = block_tables.contiguous();
  at::Tensor hidden = embedded.contiguous();
  at::Tensor residual;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const at::Tensor* w = weights.data() + layer * kLayerTensors;
    const int64_t* qm = quant.data() + layer * kLayerQuant;
    if (layer == 0) {
      residual = hidden;
      hidden = std::get<0>(rms_norm(hidden, w[0], eps, c10::nullopt));
    } else {
      std::tie(hidden, residual) = rms_norm(hidden, w[0], eps, residual);
    }
    const at::Tensor qkv = quantized_linear(hidden, w[1], w[2], mins_of(w[3]), qm[0], qm[1]);
    at::Tensor q = qkv.narrow(1, 0, q_size).reshape({tokens, num_heads, head_dim}).contiguous();
    at::Tensor k = qkv.narrow(1, q_size, kv_size).reshape({tokens, num_kv_heads, head_dim}).contiguous();
    at::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size)
                       .reshape({tokens, num_kv_heads, head_dim})
                       .contiguous();
    rotary_embedding(q, k, positions, cos_sin_cache);
    store_kv_cache(k, v, k_caches[layer], v_caches[layer], slot_mapping);
    const at::Tensor attended =
        cu_seqlens_q.has_value()
            ? prefill_attention(q, k_caches[layer], v_caches[layer], blocks, *cu_seqlens_q,
                                context_lens, scale)
            : paged_decode_attention(q, k_caches[layer], v_caches[layer], blocks, context_lens,
                                     scale);
    hidden = quantized_linear(attended.reshape({tokens, q_size}), w[4], w[5], mins_of(w[6]),
                              qm[2], qm[3]);
    std::tie(hidden, residual) = rms_norm(hidden, w[7], eps, residual);
    const at::Tensor gate_up = quantized_linear(hidden, w[8], w[9], mins_of(w[10]), qm[4], qm[5]);
    hidden = quantized_linear(silu_and_mul(gate_up), w[11], w[12], mins_of(w[13]), qm[6], qm[7]);
  }
  return {hidden, residual};
}

// How many threads the fused ops run a wide loop on here: at::get_num_threads(), the
// caller and ChunkPool's helpers. Each chunk waits (up to ten seconds) until every thread
// torch is given has checked in, so a loaded machine slows the count but cannot shrink it.
int64_t parallel_threads() {
  const PoolScope on_the_pool;
  const size_t expected = static_cast<size_t>(std::max(1, at::get_num_threads()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::mutex lock;
  std::condition_variable arrived;
  std::vector<std::thread::id> seen;
  dealt_parallel_for(0, 64, 1, [&](int64_t, int64_t) {
    std::unique_lock<std::mutex> guard(lock);
    if (std::find(seen.begin(), seen.end(), std::this_thread::get_id()) == seen.end()) {
      seen.push_back(std::this_thread::get_id());
      arrived.notify_all();
    }
    arrived.wait_until(guard, deadline, [&] { return seen.size() >= expected; });
  });
  return static_cast<int64_t>(seen.size());
}

}  // namespace

TORCH_LIBRARY(spate_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, Tensor? residual) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("store_kv_cache(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor slot_mapping) -> ()");
  m.def("rotary_embedding(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos_sin_cache) -> ()");
  m.def("paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale) -> Tensor");
  m.def("prefill_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor cu_seqlens_q, Tensor context_lens, float scale) -> Tensor");
  m.def("parallel_threads() -> int", &parallel_threads);  // no tensor to dispatch on
  m.def("quantized_linear(Tensor x, Tensor codes, Tensor scales, Tensor? mins, int bits, "
        "int offset) -> Tensor");
  m.def("decoder_layers(Tensor hidden, Tensor positions, Tensor slot_mapping, "
        "Tensor block_tables, Tensor context_lens, Tensor? cu_seqlens_q, Tensor cos_sin_cache, "
        "Tensor(a!)[] k_caches, Tensor(b!)[] v_caches, Tensor[] weights, int[] quant, "
        "int num_heads, int num_kv_heads, int head_dim, float eps, float scale) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(spate_cpu, CPU, m) {
  m.impl("rms_norm", TORCH_FN(rms_norm));
  m.impl("silu_and_mul", TORCH_FN(silu_and_mul));
  m.impl("store_kv_cache", TORCH_FN(store_kv_cache));
  m.impl("rotary_embedding", TORCH_FN(rotary_embedding));
  m.impl("paged_decode_attention", TORCH_FN(paged_decode_attention));
  m.impl("prefill_attention", TORCH_FN(prefill_attention));
  m.impl("quantized_linear", TORCH_FN(quantized_linear));
  m.impl("decoder_layers", TORCH_FN(decoder_layers));
}
