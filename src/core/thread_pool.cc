#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace sluice {

namespace {
thread_local bool t_in_parallel = false;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::HardwareThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn,
                             size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  size_t chunks = std::min<size_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1 || t_in_parallel) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    pending_ = static_cast<int>(chunks) - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  t_in_parallel = true;
  fn(0, n / chunks);  // chunk 0 on the caller
  t_in_parallel = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  t_in_parallel = true;
  for (;;) {
    const std::function<void(size_t, size_t)>* fn;
    size_t n, chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
      chunks = chunks_;
    }
    const size_t c = static_cast<size_t>(index);
    if (c < chunks) {
      const size_t begin = n * c / chunks;
      const size_t end = n * (c + 1) / chunks;
      (*fn)(begin, end);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace sluice
