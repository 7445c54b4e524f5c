// A fixed-size thread pool for data-parallel loops in kernels and batch work.
//
// ParallelFor(n, fn) runs fn(begin, end) over disjoint chunks of [0, n) on the pool's
// threads plus the caller, and returns when all chunks are done. Not re-entrant:
// calling ParallelFor from inside fn runs the inner loop serially on that thread.
// Concurrent ParallelFor calls from different threads are serialised.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means everything runs inline.
  explicit ThreadPool(int num_threads);
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

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serialises ParallelFor callers
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace sluice
