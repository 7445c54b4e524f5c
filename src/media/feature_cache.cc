#include "media/feature_cache.h"

#include <openssl/evp.h>

#include <algorithm>

namespace sluice::media {

Digest Sha256(std::string_view bytes) {
  Digest d{};
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), d.data(), &n, EVP_sha256(), nullptr);
  return d;
}

std::string DigestHex(const Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

bool FeatureCache::Get(const Digest& key, std::vector<float>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return false;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  *out = it->second->second;
  return true;
}

void FeatureCache::Put(const Digest& key, std::vector<float> value) {
  if (Cost(value) > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    bytes_ -= Cost(it->second->second);
    lru_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += Cost(value);
  lru_.emplace_front(key, std::move(value));
  index_[key] = lru_.begin();
  while (bytes_ > max_bytes_) {
    bytes_ -= Cost(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t FeatureCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t FeatureCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}
uint64_t FeatureCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
uint64_t FeatureCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace sluice::media
