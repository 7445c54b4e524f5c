// Process-wide recycling of large, 64-byte aligned host buffers (CPU backend).
//
// What a freshly loaded model version pays on its first batches of each size is mostly
// page faults: its activation workspaces (models/model.cc Workspace, via Backend::Allocate)
// and the linear layers' workspaces (workspace.h) are new allocations, and the kernel maps
// and zeroes every 4 KiB page on first touch (docs/benchmarks.md, "Model operations":
// 2,000-4,700 faults, 2-3 us each on the development VM, for the demo reranker's first
// 64-128-document batch). Buffers of >= kMinPooledBytes freed by one version (a workspace
// that grew, a version unloaded) are kept here, already faulted in, and handed to the next
// allocation that fits, instead of going back to the OS.
//
// Bound: at most Capacity() bytes are held (kDefaultCapacity, 256 MiB); a buffer that would
// exceed it evicts the oldest held ones, and one larger than the bound is freed at once.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice::cpu {

class BufferPool {
 public:
  static constexpr size_t kMinPooledBytes = 256 * 1024;
  static constexpr size_t kDefaultCapacity = size_t{256} << 20;

  // A buffer of at least `bytes` bytes (64-byte aligned; contents unspecified): a held one
  // of at most twice the size if there is one, else a new allocation. *capacity (if set)
  // receives its real size, to give back to Release.
  static void* Acquire(size_t bytes, size_t* capacity = nullptr);
  // Returns a buffer from Acquire (with its capacity): held if it is large enough and fits
  // the bound, else freed. nullptr is ignored.
  static void Release(void* p, size_t capacity);
  // Acquire as a shared_ptr that releases it.
  static std::shared_ptr<void> Shared(size_t bytes);

  struct Stats {
    int64_t reused = 0;      // Acquire calls served from held buffers
    int64_t allocated = 0;   // Acquire calls that allocated
    int64_t held = 0;        // buffers held now
    int64_t held_bytes = 0;  // their bytes
  };
  static Stats GetStats();
  static size_t Capacity();
  // Tests: changes the bound (0 disables holding) and frees what no longer fits.
  static void SetCapacityForTesting(size_t bytes);
};

}  // namespace sluice::cpu
