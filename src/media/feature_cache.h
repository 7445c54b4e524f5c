// A byte-bounded LRU cache of per-image features (e.g. CLIP image embeddings), keyed by the
// SHA-256 of the image's bytes. Keys are content hashes, never URLs: the same bytes under
// two URLs share an entry, a URL whose content changed misses. A feature depends only on
// the bytes and the model (one cache per loaded model version), never on the batch an image
// was computed in, so a hit is exactly what a miss would compute. Thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::media {

using Digest = std::array<uint8_t, 32>;
Digest Sha256(std::string_view bytes);
std::string DigestHex(const Digest& d);

class FeatureCache {
 public:
  // At most max_bytes of feature values (4 bytes per float) plus a fixed per-entry
  // overhead (kEntryOverhead) are kept; 0 keeps nothing.
  explicit FeatureCache(size_t max_bytes) : max_bytes_(max_bytes) {}
  static constexpr size_t kEntryOverhead = 128;
  // Copies the feature into *out and returns true on a hit.
  bool Get(const Digest& key, std::vector<float>* out);
  void Put(const Digest& key, std::vector<float> value);
  size_t size() const;   // entries
  size_t bytes() const;  // accounted bytes
  size_t max_bytes() const { return max_bytes_; }
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  struct Hash {
    size_t operator()(const Digest& d) const {
      size_t h;
      static_assert(sizeof(h) <= sizeof(Digest));
      std::copy_n(d.data(), sizeof(h), reinterpret_cast<uint8_t*>(&h));
      return h;
    }
  };
  using Lru = std::list<std::pair<Digest, std::vector<float>>>;
  static size_t Cost(const std::vector<float>& v) {
    return v.size() * sizeof(float) + kEntryOverhead;
  }
  const size_t max_bytes_;
  size_t bytes_ = 0;
  mutable std::mutex mu_;
  Lru lru_;  // most recent first
  std::unordered_map<Digest, Lru::iterator, Hash> index_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace sluice::media
