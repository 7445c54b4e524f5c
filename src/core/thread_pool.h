// A fixed-size thread pool for data-parallel loops in kernels and batch work.
//
// ParallelFor(n, fn) runs fn(begin, end) over disjoint chunks of [0, n) on the pool's
// threads plus the caller, and returns when all chunks are done. Not re-entrant:
// calling ParallelFor from inside fn runs the inner loop serially on that thread.
// Concurrent ParallelFor calls from different threads are serialised.
//
// Workers sleep on one atomic word (a futex: a call wakes them all at once, no mutex
// hand-off from one to the next) that carries the call's sequence number and chunk count; a
// worker whose index is past the chunk count goes back to sleep without touching the call.
// spin_us > 0 makes the caller and the workers spin that long before sleeping (for pools
// called in quick succession, e.g. the logits processors on every generation step; spinning
// burns the cores, so it is off by default).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means everything runs inline.
  explicit ThreadPool(int num_threads, int spin_us = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into at most num_threads contiguous chunks of at least `grain`.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

  // Number of hardware threads this process may use (sched affinity aware).
  static int HardwareThreads();

 private:
  void WorkerLoop(int index);

  static constexpr uint32_t kChunkBits = 8;  // chunks <= 255: threads are capped at 256
  int num_threads_;
  int spin_us_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serialises ParallelFor callers
  // (sequence << kChunkBits) | chunks of the current call; chunks 0 = stop.
  std::atomic<uint32_t> call_{0};
  std::atomic<int> pending_{0};  // worker chunks of the current call not yet done
  // The current call (written before call_ is published, read by its participants only).
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
};

}  // namespace sluice
