// Large buffers (std::string, std::vector) given back once used, for the next user whose size
// fits: their pages are already mapped, where a fresh block of 1 MiB or more (mmapped by
// malloc) costs a page fault per 4 KiB. Thread-safe; at most max_bytes of capacity are kept,
// and buffers under min_bytes are left to malloc's arenas.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace sluice {

template <typename Buffer>
class RecyclePool {
 public:
  RecyclePool(size_t max_bytes, size_t min_bytes) : max_bytes_(max_bytes), min_bytes_(min_bytes) {}

  // The kept buffer of the smallest capacity that holds `bytes` into *out (its contents
  // unspecified); false when none does.
  bool Take(size_t bytes, Buffer* out) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i) {
      const size_t c = Bytes(kept_[i]);
      if (c >= bytes && (best == kept_.size() || c < Bytes(kept_[best]))) best = i;
    }
    if (best == kept_.size()) return false;
    *out = std::move(kept_[best]);
    kept_[best] = std::move(kept_.back());
    kept_.pop_back();
    bytes_ -= Bytes(*out);
    return true;
  }
  // Keeps `b` if it is large enough and fits the budget; frees it otherwise.
  void Keep(Buffer&& b) {
    const size_t c = Bytes(b);
    if (c < min_bytes_) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + c > max_bytes_) return;
    bytes_ += c;
    kept_.push_back(std::move(b));
  }
  size_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  static size_t Bytes(const Buffer& b) {
    return b.capacity() * sizeof(typename Buffer::value_type);
  }
  const size_t max_bytes_, min_bytes_;
  mutable std::mutex mu_;
  std::vector<Buffer> kept_;
  size_t bytes_ = 0;
};

}  // namespace sluice
