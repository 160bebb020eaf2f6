// The fused ops' threads. Which thread computes a chunk of a loop changes none of its
// bits: every value a row produces is computed by one thread, in one fixed order.

#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace spate_cpu {

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

// The caller and up to at::get_num_threads() - 1 helpers take chunks of a loop from a
// shared counter, and the caller returns as soon as every chunk is done. OpenMP's
// parallel regions (at::parallel_for) end in a barrier that waits for every thread of the
// team, so on a served worker, which shares its cores with the API and NATS, a thread the
// OS took away held up each op until it ran again; here a helper that comes late finds
// the loop done and the op has not waited for it. One pool per library, its threads
// started at first use (chunk_pool.cpp).
class ChunkPool {
 public:
  static ChunkPool& instance();

  // f(chunk_begin, chunk_end) for every chunk of [begin, end), on `threads` threads.
  template <typename F>
  void run(int64_t begin, int64_t end, int64_t grain, int64_t threads, const F& f) {
    if (end - begin <= grain || threads <= 1 || in_chunk()) {
      for (int64_t start = begin; start < end; start += grain) f(start, std::min(end, start + grain));
      return;
    }
    auto call = [](const void* fn, int64_t b, int64_t e) { (*static_cast<const F*>(fn))(b, e); };
    run(begin, end, grain, threads, &f, call);
  }

 private:
  using Call = void (*)(const void*, int64_t, int64_t);

  ChunkPool() = default;
  static bool in_chunk();
  void run(int64_t begin, int64_t end, int64_t grain, int64_t threads, const void* fn, Call call);
  void take_chunks();
  void ensure_helpers(int64_t count);
  void helper(int64_t index, uint64_t seen);

  std::mutex caller_lock_, wake_lock_;
  std::condition_variable wake_;
  size_t helpers_ = 0;
  const void* fn_ = nullptr;
  Call call_ = nullptr;
  int64_t end_ = 0, grain_ = 1, team_ = 1;
  std::atomic<int64_t> wanted_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<bool> open_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> active_{0}, sleepers_{0};
};

// Whether this thread's ops run on ChunkPool (PoolScope) or on torch's OpenMP threads.
// The pool serves the ops that follow one another with no torch op between them (the
// decoder layers in one call, a quantized linear); an op between torch's own (the bf16
// path's attention between oneDNN linears) stays on OpenMP, where two pools' threads
// would wait for work in turn on the same cores.
inline thread_local bool pool_scope = false;

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

}  // namespace spate_cpu
