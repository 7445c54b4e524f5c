#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace sluice {

namespace {
thread_local bool t_in_parallel = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins up to spin_us for pred(); true when it held.
template <typename Pred>
bool SpinFor(int spin_us, Pred pred) {
  if (spin_us <= 0) return pred();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until) return pred();
  }
}
}  // namespace

ThreadPool::ThreadPool(int num_threads, int spin_us)
    : num_threads_(std::clamp(num_threads, 1, 1 << kChunkBits)), spin_us_(std::max(0, spin_us)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  // Sequence + 1 with 0 chunks: every worker sees a new call word and returns.
  const uint32_t seq = (call_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
  call_.store(seq << kChunkBits, std::memory_order_release);
  call_.notify_all();
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
  const size_t chunks = std::min<size_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1 || t_in_parallel) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  fn_ = &fn;
  n_ = n;
  pending_.store(static_cast<int>(chunks) - 1, std::memory_order_relaxed);
  // The sequence changes on every call, so a worker never mistakes this call for the last
  // one; it wraps after 2^24 calls, far more than a worker can sleep through (the workers of
  // a call are waited for below, and the others are woken by every call).
  const uint32_t seq = (call_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
  call_.store((seq << kChunkBits) | static_cast<uint32_t>(chunks), std::memory_order_release);
  call_.notify_all();
  t_in_parallel = true;
  fn(0, n / chunks);  // chunk 0 on the caller
  t_in_parallel = false;
  if (!SpinFor(spin_us_, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    for (int p = pending_.load(std::memory_order_acquire); p != 0;
         p = pending_.load(std::memory_order_acquire)) {
      pending_.wait(p, std::memory_order_acquire);
    }
  }
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  // The word's value when the pool was made: a call published before this thread ran is
  // still new to it.
  uint32_t seen = 0;
  t_in_parallel = true;
  for (;;) {
    uint32_t c = call_.load(std::memory_order_acquire);
    if (c == seen) {
      SpinFor(spin_us_, [&] {
        c = call_.load(std::memory_order_acquire);
        return c != seen;
      });
      while (c == seen) {
        call_.wait(seen, std::memory_order_acquire);
        c = call_.load(std::memory_order_acquire);
      }
    }
    seen = c;
    const size_t chunks = c & ((1u << kChunkBits) - 1);
    if (chunks == 0) return;  // stop
    const size_t k = static_cast<size_t>(index);
    if (k >= chunks) continue;
    // A participant: the caller waits for it, so fn_ and n_ still describe this call.
    const size_t n = n_;
    (*fn_)(n * k / chunks, n * (k + 1) / chunks);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace sluice
