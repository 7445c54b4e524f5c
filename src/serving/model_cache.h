// Model cache (docs/model-ops.md, "Model cache"): `sluice pull SOURCE --cache DIR` and
// `sluice serve --model NAME=SOURCE --model-cache DIR` materialise a model from
//
//   a directory              copied (symlinks followed: Hugging Face snapshot layouts)
//   a .tar / .tar.gz / .tar.zst archive read in place (serving/archive.h; the compression
//                            detected by its magic bytes)
//   an http(s):// or file:// URL of such an archive (libcurl), downloaded to DIR/tmp/
//
// into DIR/models/<key>/ (key: SHA-256 of the source), with a manifest
// (.sluice-manifest.json: every file's size and SHA-256, the archive's SHA-256, the bytes).
// `SOURCE#sha256=HEX` (or `expected_sha256`) checks the archive's SHA-256 before anything is
// extracted. Steps, and what failure leaves:
//
//   lock      DIR/locks/<key>.lock (flock): concurrent pulls of one source, in this process
//             or others, wait for the first and then find it cached (they coalesce)
//   fetch     into DIR/tmp/<key>.part; an interrupted download is resumed from its end by
//             the next pull (HTTP Range), restarted when the server ignores the range, and
//             discarded when the result fails its checksum or does not extract
//   extract   into a fresh DIR/tmp/ directory: regular files and directories only; absolute
//             paths, "..", links and devices are refused; a truncated or corrupt archive (bad
//             header checksum, data or end-of-archive blocks missing, gzip cut short) fails;
//             a write error (disk full) fails and removes what was written
//   evict     least recently used entries (of those no pull or server holds) until the new entry
//   fits
//             under max_bytes; one larger than max_bytes alone is refused
//   install   rename into DIR/models/<key> (atomic): an entry is complete or absent
//
// A hit checks the manifest's file sizes (a full re-hash: Verify) and marks the entry used.
// Archives with one top-level directory are served from that directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::serving {

struct CacheOptions {
  std::string dir;
  int64_t max_bytes = 0;  // 0 = no limit
};

struct PullResult {
  std::string path;  // the model directory to serve
  bool hit = false;  // already cached
  int64_t bytes = 0;
  std::string sha256;  // of the archive (or of the manifest's file list for a directory)
  double seconds = 0;
  bool resumed = false;  // a partial download was continued
  // A shared lock on the entry while held: eviction (by any process) skips the entry.
  std::shared_ptr<const void> in_use;
};

// Whether a --model PATH names a cache source rather than a served directory: a URL or an
// archive file.
bool IsCacheSource(std::string_view source);

// Process-wide counters of ModelCache::Pull, as Prometheus text:
// sluice_model_cache_requests_total{result="hit"|"miss"|"error"}, sluice_model_cache_bytes_total
// (bytes materialised by misses), sluice_model_cache_pull_seconds_total and
// sluice_model_cache_bytes (the cache's size after the last pull).
std::string RenderCacheMetrics();

class ModelCache {
 public:
  static StatusOr<ModelCache> Open(CacheOptions options);
  // `expected_sha256` (hex, optional) overrides a `#sha256=` suffix of the source.
  StatusOr<PullResult> Pull(const std::string& source, std::string expected_sha256 = "") const;
  // Re-hashes every file of the cached entry of `source` against its manifest.
  Status Verify(const std::string& source) const;
  // Bytes of every installed entry.
  int64_t TotalBytes() const;
  const std::string& dir() const { return options_.dir; }

 private:
  explicit ModelCache(CacheOptions options) : options_(std::move(options)) {}
  StatusOr<PullResult> PullUncounted(const std::string& source, std::string expected) const;
  CacheOptions options_;
};

}  // namespace sluice::serving
