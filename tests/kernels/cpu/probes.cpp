// Probes of the fused CPU ops' machinery that only the tests use, built by them into a
// library of their own (tests/kernels/test_cpu_ops.py) with the pool's source
// (kernels/cpu/chunk_pool.cpp), so the library the workers load carries none of it.

#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "chunk_pool.h"

namespace {

using spate_cpu::PoolScope;
using spate_cpu::dealt_parallel_for;

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

TORCH_LIBRARY(spate_cpu_probes, m) {
  m.def("parallel_threads() -> int", &parallel_threads);  // no tensor to dispatch on
}
