#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace sluice {

uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64-style mixing of the parent hash and each token.
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  auto mix = [](uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
  };
  for (int32_t t : tokens) h = mix(h + static_cast<uint32_t>(t) + 0x632BE59BD9B4E019ull);
  return mix(h + tokens.size());
}

BlockPool::BlockPool(int num_blocks, bool prefix_caching)
    : prefix_caching_(prefix_caching), meta_(static_cast<size_t>(num_blocks) + 1) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int b = num_blocks; b >= 1; --b) free_.push_back(b);  // block 1 handed out first
}

void BlockPool::LruPush(int b) {
  Meta& m = meta_[b];
  m.prev = lru_tail_;
  m.next = -1;
  if (lru_tail_ >= 0) meta_[lru_tail_].next = b;
  lru_tail_ = b;
  if (lru_head_ < 0) lru_head_ = b;
  ++lru_size_;
}

void BlockPool::LruRemove(int b) {
  Meta& m = meta_[b];
  if (m.prev >= 0) meta_[m.prev].next = m.next;
  if (m.next >= 0) meta_[m.next].prev = m.prev;
  if (lru_head_ == b) lru_head_ = m.next;
  if (lru_tail_ == b) lru_tail_ = m.prev;
  m.prev = m.next = -1;
  --lru_size_;
}

void BlockPool::Unhash(int b) {
  Meta& m = meta_[b];
  if (!m.hashed) return;
  auto it = by_hash_.find(m.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  m.hashed = false;
}

std::optional<int> BlockPool::Allocate() {
  int b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    LruRemove(b);
    Unhash(b);
    ++stats_.evictions;
  } else {
    return std::nullopt;
  }
  meta_[b].refs = 1;
  return b;
}

void BlockPool::Retain(int block) {
  Meta& m = meta_[block];
  if (m.refs == 0 && m.hashed) LruRemove(block);
  ++m.refs;
}

void BlockPool::Release(int block) {
  Meta& m = meta_[block];
  if (--m.refs > 0) return;
  if (m.hashed) {
    LruPush(block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::Publish(int block, uint64_t parent, std::span<const int32_t> tokens) {
  if (!prefix_caching_ || tokens.size() != static_cast<size_t>(kKvBlockSize)) return;
  Meta& m = meta_[block];
  if (m.hashed) return;
  const uint64_t h = BlockHash(parent, tokens);
  if (by_hash_.count(h)) return;  // another block holds these tokens already
  m.hashed = true;
  m.hash = h;
  m.parent = parent;
  std::copy(tokens.begin(), tokens.end(), m.tokens);
  by_hash_.emplace(h, block);
}

std::optional<int> BlockPool::Lookup(uint64_t parent, std::span<const int32_t> tokens) {
  if (!prefix_caching_ || tokens.size() != static_cast<size_t>(kKvBlockSize)) {
    return std::nullopt;
  }
  auto it = by_hash_.find(BlockHash(parent, tokens));
  if (it == by_hash_.end()) return std::nullopt;
  const int b = it->second;
  const Meta& m = meta_[b];
  if (m.parent != parent || !std::equal(tokens.begin(), tokens.end(), m.tokens)) {
    return std::nullopt;  // a hash collision: not the same tokens
  }
  Retain(b);
  return b;
}

int64_t KvCache::BlockBytes(int num_layers, int64_t kv_dim, DType dtype) {
  return 2ll * num_layers * kKvBlockSize * kv_dim * static_cast<int64_t>(DTypeSize(dtype));
}

KvCache::KvCache(Backend* backend, int num_layers, int64_t kv_dim, DType dtype, int num_blocks)
    : num_blocks_(num_blocks) {
  const int64_t rows = static_cast<int64_t>(num_blocks + 1) * kKvBlockSize;
  for (int l = 0; l < 2 * num_layers; ++l) {
    buffers_.push_back(backend->Allocate(dtype, rows, kv_dim));
    tensors_.push_back(buffers_.back().t());
  }
  bytes_ = BlockBytes(num_layers, kv_dim, dtype) * (num_blocks + 1);
}

}  // namespace sluice
