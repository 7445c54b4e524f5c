// A growable, 64-byte aligned scratch buffer. Grows on demand and never shrinks, so a
// steady-state workload allocates nothing. Not thread-safe: one per thread or per user.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace sluice::cpu {

class Workspace {
 public:
  // Returns at least `bytes` bytes; contents are unspecified after growth.
  void* Get(size_t bytes) {
    if (bytes > size_) {
      size_t n = (bytes + 63) / 64 * 64;
      mem_.reset(static_cast<char*>(std::aligned_alloc(64, n)));
      size_ = n;
    }
    return mem_.get();
  }
  template <typename T>
  T* Get(size_t n) {
    return static_cast<T*>(Get(n * sizeof(T)));
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> mem_;
  size_t size_ = 0;
};

}  // namespace sluice::cpu
