// Model archives and file hashing for the model cache (serving/model_cache.h):
// a .tar, .tar.gz or .tar.zst archive (the compression recognised by its magic bytes, not the
// file name) is extracted in place, regular files and directories only, each file hashed as it
// is written. Absolute paths, "..", links and devices are refused; a truncated or corrupt
// archive (a bad header checksum, data or the end-of-archive blocks missing, a gzip or zstd
// stream cut short or damaged) and a write error fail with the reason.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::serving {

struct FileEntry {
  std::string path;  // relative to the model root
  int64_t size = 0;
  std::string sha256;
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* p, size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  std::string Hex();  // lower-case hex; once

 private:
  EVP_MD_CTX* ctx_;
};

std::string HashOf(std::string_view s);
StatusOr<std::string> HashFile(const std::string& path);

// "what: strerror(errno)".
std::string ErrnoMessage(const std::string& what);
Status WriteAll(FILE* f, const char* p, size_t n, const std::string& path);

// Extracts `archive` into `root` (an empty directory), appending every file to *files. If
// *sha is empty it is set to the archive's SHA-256 (every byte of the file, trailers included).
Status ExtractArchive(const std::string& archive, const std::filesystem::path& root,
                      std::vector<FileEntry>* files, std::string* sha);

}  // namespace sluice::serving
