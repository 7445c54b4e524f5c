// A growable, 64-byte aligned scratch buffer. Grows on demand and never shrinks, so a
// steady-state workload allocates nothing. Not thread-safe: one per thread or per user.
// Large buffers come from and go back to the process-wide BufferPool (buffer_pool.h), so a
// new model version's workspaces reuse pages an earlier one has already faulted in.
#pragma once

#include <cstddef>

#include "backend/cpu/buffer_pool.h"

namespace sluice::cpu {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { BufferPool::Release(mem_, size_); }

  // Returns at least `bytes` bytes; contents are unspecified after growth.
  void* Get(size_t bytes) {
    if (bytes > size_) {
      BufferPool::Release(mem_, size_);
      mem_ = nullptr;
      size_ = 0;
      mem_ = BufferPool::Acquire(bytes, &size_);
    }
    return mem_;
  }
  template <typename T>
  T* Get(size_t n) {
    return static_cast<T*>(Get(n * sizeof(T)));
  }

 private:
  void* mem_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sluice::cpu
