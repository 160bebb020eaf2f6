// ChunkPool's threads and its handing out of one loop at a time (chunk_pool.h).

#include "chunk_pool.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace spate_cpu {
namespace {

// Pause instructions before a helper sleeps: tens of microseconds to about a
// millisecond, by CPU; longer than the gaps between the ops of one step.
constexpr int kSpins = 20000;

// Whether this thread is inside a chunk: a loop started there runs on this thread alone.
thread_local bool in_chunk_ = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

ChunkPool& ChunkPool::instance() {
  static ChunkPool* pool = new ChunkPool();  // never destroyed: its threads outlive exit
  return *pool;
}

bool ChunkPool::in_chunk() { return in_chunk_; }

void ChunkPool::run(int64_t begin, int64_t end, int64_t grain, int64_t threads, const void* fn,
                    Call call) {
  std::lock_guard<std::mutex> caller(caller_lock_);  // one loop at a time
  ensure_helpers(threads - 1);
  fn_ = fn;
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

void ChunkPool::take_chunks() {
  in_chunk_ = true;
  int64_t start = 0, stop = 0;
  while (next_chunk(next_, end_, grain_, team_, start, stop)) call_(fn_, start, stop);
  in_chunk_ = false;
}

// Called before the loop's generation is announced: a new helper waits for the next one.
void ChunkPool::ensure_helpers(int64_t count) {
  while (static_cast<int64_t>(helpers_) < count) {
    const int64_t index = helpers_++;
    const uint64_t seen = generation_.load();
    std::thread([this, index, seen] { helper(index, seen); }).detach();
  }
}

void ChunkPool::helper(int64_t index, uint64_t seen) {
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

}  // namespace spate_cpu
