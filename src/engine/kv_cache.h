// The paged KV cache: fixed-size blocks of kKvBlockSize token positions, per-layer K and V
// tensors on the device (BlockPool hands out block indices; KvCache owns the memory), and
// automatic prefix caching: a full block is identified by a hash chain (its parent block's
// hash and its own tokens), so a new sequence whose prompt starts with blocks another
// sequence computed reuses them. Unreferenced cached blocks stay cached until a new block
// is needed, evicted least recently used first.
//
// Not thread-safe: the generation engine's thread owns both.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace sluice {

constexpr int kKvBlockSize = 16;

// Hash of a full block given its parent's (0 for the first block).
uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens);

struct PrefixCacheStats {
  int64_t queries = 0;  // prompt tokens looked up
  int64_t hits = 0;     // of them found in cached blocks
  int64_t evictions = 0;
};

// Hands out blocks 1 .. num_blocks: block 0 is never given to a sequence (padded rows of a
// recorded forward write their keys and values there).
class BlockPool {
 public:
  BlockPool(int num_blocks, bool prefix_caching);

  int num_blocks() const { return static_cast<int>(meta_.size()) - 1; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks that Allocate can return now: free ones and unreferenced cached ones.
  int available() const { return static_cast<int>(free_.size()) + lru_size_; }
  // Blocks referenced by sequences.
  int in_use() const { return num_blocks() - available(); }
  int cached() const { return static_cast<int>(by_hash_.size()); }
  const PrefixCacheStats& stats() const { return stats_; }

  // A block for a sequence (reference count 1): a free block, else the least recently used
  // unreferenced cached block (which leaves the cache). nullopt when none is available.
  std::optional<int> Allocate();
  // Drops one reference; an unreferenced block goes back to the free list, or to the LRU
  // end of the cache when it holds a published full block.
  void Release(int block);
  // Adds a reference (a forked sequence sharing its parent's full blocks).
  void Retain(int block);
  int refs(int block) const { return meta_[block].refs; }

  // Publishes a full, computed block under its hash chain. A block already cached under the
  // same hash (computed by another sequence meanwhile) stays the cached one.
  void Publish(int block, uint64_t parent, std::span<const int32_t> tokens);
  // The cached block holding `tokens` after `parent`, with a reference added (taken off the
  // LRU list if it was unreferenced); nullopt on a miss. Tokens are compared, not only
  // hashes.
  std::optional<int> Lookup(uint64_t parent, std::span<const int32_t> tokens);
  // Counts a prefix-cache query of `tokens` prompt tokens, `hit` of them found.
  void CountQuery(int64_t tokens, int64_t hit) {
    stats_.queries += tokens;
    stats_.hits += hit;
  }

 private:
  struct Meta {
    int refs = 0;
    bool hashed = false;
    uint64_t hash = 0, parent = 0;
    int32_t tokens[kKvBlockSize] = {};
    int prev = -1, next = -1;  // LRU list links (unreferenced hashed blocks)
  };
  void LruPush(int b);
  void LruRemove(int b);
  void Unhash(int b);

  bool prefix_caching_;
  std::vector<Meta> meta_;
  std::vector<int> free_;
  std::unordered_map<uint64_t, int> by_hash_;
  int lru_head_ = -1, lru_tail_ = -1, lru_size_ = 0;
  PrefixCacheStats stats_;
};

// Device memory of the cache: per layer a K and a V tensor of [(num_blocks + 1) *
// kKvBlockSize, kv_dim] in the activation dtype (block 0 is the padding sink, BlockPool).
class KvCache {
 public:
  KvCache(Backend* backend, int num_layers, int64_t kv_dim, DType dtype, int num_blocks);
  // Bytes one block takes over all layers (K and V).
  static int64_t BlockBytes(int num_layers, int64_t kv_dim, DType dtype);
  const std::vector<Tensor>& tensors() const { return tensors_; }  // K0, V0, K1, V1, ...
  int num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<Buffer> buffers_;
  std::vector<Tensor> tensors_;
  int num_blocks_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace sluice
