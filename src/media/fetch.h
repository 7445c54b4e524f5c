// Fetching the images a request names: http(s) URLs (libcurl multi, transfers of one call in
// parallel, connections and DNS results kept across calls), data: URIs (base64 or
// percent-encoded) and local files (only under an allowed directory).
//
// SSRF guard: every address libcurl is about to connect to (the first request and every
// redirect, whatever the DNS answer) is checked before the socket opens; loopback, private
// (RFC 1918, unique-local), link-local (169.254.0.0/16 with the cloud metadata address,
// fe80::/10), carrier-grade NAT, multicast, unspecified and reserved addresses are refused
// unless allow_private, and no byte is ever sent to them. IPv4-mapped and NAT64 IPv6
// addresses are checked as the IPv4 address they carry. Only http and https, also for
// redirects (at most max_redirects).
//
// Limits: connect and total timeouts, bytes per image (a larger Content-Length is refused
// before the body is read) and per call. Every failure names the source (URLs as given,
// data: URIs shortened) and the reason: HTTP status, timeout, refused address, size,
// malformed URI, file outside the allowed directory.
//
// Thread-safe: FetchAll may be called from several threads at once. Each call uses a libcurl
// multi handle of its own, taken from a pool: connections are kept alive in the handle
// between the calls that use it (never used by two threads at once), DNS results are
// shared by all.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::media {

struct FetchOptions {
  int concurrency = 8;  // transfers of one FetchAll call at a time
  int connect_timeout_ms = 5000;
  int total_timeout_ms = 20000;
  int64_t max_bytes = 32 << 20;           // one image
  int64_t max_request_bytes = 256 << 20;  // all the sources of one call
  int max_redirects = 5;
  bool allow_private = false;  // --allow-private-media-urls
  // Numeric addresses allowed even though the guard would refuse them (an internal image
  // host), compared as written by inet_ntop (e.g. "10.1.2.3", "fd00::5").
  std::vector<std::string> allowed_addresses;
  std::string local_root;  // --allowed-local-media-path; empty: no local files
};

// Whether an address is one the guard refuses (for tests and logs). `ip` is a numeric
// IPv4 or IPv6 address; anything unparsable counts as refused.
bool IsPrivateAddress(const std::string& ip);

class MediaFetcher {
 public:
  explicit MediaFetcher(FetchOptions options);
  ~MediaFetcher();
  MediaFetcher(const MediaFetcher&) = delete;
  MediaFetcher& operator=(const MediaFetcher&) = delete;

  const FetchOptions& options() const { return options_; }
  // The bytes of every source, in order; one failure does not stop the others.
  std::vector<StatusOr<std::string>> FetchAll(const std::vector<std::string>& sources);
  // Gives a fetched body back once its bytes are no longer needed: a later download of an
  // announced size reuses its memory, whose pages are already mapped (a fresh 4 MB body costs
  // ~1,000 page faults). At most kRecycleBytes are kept; the rest is freed.
  void Recycle(std::string&& body);
  static constexpr size_t kRecycleBytes = size_t{64} << 20;
  size_t RecycledBytesForTesting() const;

 private:
  struct Shared;
  FetchOptions options_;
  std::unique_ptr<Shared> shared_;
};

// "data:" URIs: the payload (base64 when ";base64" is given, else percent-decoded).
StatusOr<std::string> DecodeDataUri(const std::string& uri, int64_t max_bytes);

}  // namespace sluice::media
