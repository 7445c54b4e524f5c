#include "backend/cpu/buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>

namespace sluice::cpu {
namespace {

struct Held {
  void* p;
  size_t bytes;
};

struct Pool {
  std::mutex mu;
  std::deque<Held> held;  // oldest first
  size_t held_bytes = 0;
  size_t capacity = BufferPool::kDefaultCapacity;
  int64_t reused = 0, allocated = 0;

  // Frees the oldest held buffers until `extra` more bytes fit the bound.
  void Trim(size_t extra) {
    while (!held.empty() && held_bytes + extra > capacity) {
      held_bytes -= held.front().bytes;
      std::free(held.front().p);
      held.pop_front();
    }
  }
};

Pool& P() {
  static Pool* pool = new Pool;  // never destroyed: buffers may be released at exit
  return *pool;
}

}  // namespace

void* BufferPool::Acquire(size_t bytes, size_t* capacity) {
  const size_t want = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  Pool& pool = P();
  if (want >= kMinPooledBytes) {
    std::lock_guard<std::mutex> lock(pool.mu);
    // The smallest held buffer that fits and wastes at most half of itself.
    size_t best = pool.held.size();
    for (size_t i = 0; i < pool.held.size(); ++i) {
      const size_t b = pool.held[i].bytes;
      if (b >= want && b / 2 <= want && (best == pool.held.size() || b < pool.held[best].bytes)) {
        best = i;
      }
    }
    if (best != pool.held.size()) {
      const Held h = pool.held[best];
      pool.held.erase(pool.held.begin() + static_cast<std::ptrdiff_t>(best));
      pool.held_bytes -= h.bytes;
      ++pool.reused;
      if (capacity) *capacity = h.bytes;
      return h.p;
    }
    ++pool.allocated;
  }
  if (capacity) *capacity = want;
  return std::aligned_alloc(64, want);
}

void BufferPool::Release(void* p, size_t capacity) {
  if (p == nullptr) return;
  Pool& pool = P();
  if (capacity >= kMinPooledBytes) {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (capacity <= pool.capacity) {
      pool.Trim(capacity);
      pool.held.push_back({p, capacity});
      pool.held_bytes += capacity;
      return;
    }
  }
  std::free(p);
}

std::shared_ptr<void> BufferPool::Shared(size_t bytes) {
  size_t cap = 0;
  void* p = Acquire(bytes, &cap);
  return std::shared_ptr<void>(p, [cap](void* q) { Release(q, cap); });
}

BufferPool::Stats BufferPool::GetStats() {
  Pool& pool = P();
  std::lock_guard<std::mutex> lock(pool.mu);
  Stats s;
  s.reused = pool.reused;
  s.allocated = pool.allocated;
  s.held = static_cast<int64_t>(pool.held.size());
  s.held_bytes = static_cast<int64_t>(pool.held_bytes);
  return s;
}

size_t BufferPool::Capacity() {
  Pool& pool = P();
  std::lock_guard<std::mutex> lock(pool.mu);
  return pool.capacity;
}

void BufferPool::SetCapacityForTesting(size_t bytes) {
  Pool& pool = P();
  std::lock_guard<std::mutex> lock(pool.mu);
  pool.capacity = bytes;
  pool.Trim(0);
}

}  // namespace sluice::cpu
