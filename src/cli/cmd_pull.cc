// `sluice pull SOURCE --cache DIR`: materialises a model (a directory, a .tar/.tar.gz archive,
// an http(s):// or file:// URL of one) into the model cache (serving/model_cache.h,
// docs/model-ops.md "Model cache") and prints one JSON line: the directory to serve, hit or
// miss, bytes, SHA-256, seconds.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "io/json.h"
#include "serving/model_cache.h"

namespace sluice::cli {
namespace {

struct PullFlags {
  std::string source;
  std::string cache;
  int64_t max_bytes = 0;
  std::string sha256;
  bool verify = false;
};

int RunPull(const PullFlags& f) {
  serving::CacheOptions o;
  o.dir = f.cache;
  o.max_bytes = f.max_bytes;
  auto cache = serving::ModelCache::Open(o);
  if (!cache.ok()) return ReportError(cache.status());
  auto r = cache->Pull(f.source, f.sha256);
  if (!r.ok()) return ReportError(r.status());
  if (f.verify) {
    if (Status s = cache->Verify(f.source); !s.ok()) return ReportError(s);
  }
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("path", r->path);
  w.Key("hit");
  w.Bool(r->hit);
  w.Key("resumed");
  w.Bool(r->resumed);
  w.KeyInt("bytes", r->bytes);
  w.KeyString("sha256", r->sha256);
  w.Key("seconds");
  w.Float(static_cast<float>(r->seconds));
  w.KeyInt("cache_bytes", cache->TotalBytes());
  w.EndObject();
  std::printf("%s\n", w.str().c_str());
  return 0;
}

Registrar pull_cmd(Command{
    "pull", "Materialise a model (directory, .tar/.tar.gz, http(s)/file URL) into the model cache",
    [](CLI::App* sub) {
      auto f = std::make_shared<PullFlags>();
      sub->add_option("source", f->source,
                      "a model directory, a .tar/.tar.gz archive, or an http(s):// or file:// "
                      "URL of one; SOURCE#sha256=HEX checks the archive's SHA-256")
          ->required();
      sub->add_option("--cache", f->cache, "the cache directory")->required();
      sub->add_option("--cache-max-bytes", f->max_bytes,
                      "bytes the cache may hold (0 = no limit): least recently used entries are "
                      "evicted to make room")
          ->capture_default_str();
      sub->add_option("--sha256", f->sha256, "the archive's expected SHA-256 (hex)");
      sub->add_flag("--verify", f->verify,
                    "re-hash every cached file against the manifest (also on a hit)");
      return std::function<int()>([f] { return RunPull(*f); });
    }});

}  // namespace
}  // namespace sluice::cli
