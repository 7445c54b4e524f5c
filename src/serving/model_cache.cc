#include "serving/model_cache.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "io/json.h"
#include "serving/archive.h"

namespace sluice::serving {
namespace {

namespace fs = std::filesystem;
constexpr const char* kManifest = ".sluice-manifest.json";

// flock on a file of DIR/locks/.
class FileLock {
 public:
  static StatusOr<std::unique_ptr<FileLock>> Take(const std::string& path, int op) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return InvalidArgument(ErrnoMessage("cannot open the lock " + path));
    int r;
    do {
      r = ::flock(fd, op);
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
      ::close(fd);
      return FailedPrecondition("locked");
    }
    return std::unique_ptr<FileLock>(new FileLock(fd));
  }
  ~FileLock() { ::close(fd_); }  // releases the lock

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status CopyDirectory(const fs::path& src, const fs::path& root, std::vector<FileEntry>* files) {
  std::error_code ec;
  if (!fs::is_directory(src, ec)) return NotFound("no such directory: " + src.string());
  std::vector<char> buf(1 << 20);
  for (auto it = fs::recursive_directory_iterator(
           src, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;  // directories are made as files need them
    const std::string rel = fs::relative(it->path(), src).string();
    const fs::path dst = root / rel;
    fs::create_directories(dst.parent_path());
    FILE* in = std::fopen(it->path().c_str(), "rb");
    if (!in) return InvalidArgument(ErrnoMessage("cannot read " + it->path().string()));
    FILE* out = std::fopen(dst.c_str(), "wb");
    if (!out) {
      std::fclose(in);
      return InvalidArgument(ErrnoMessage("cannot create " + dst.string()));
    }
    Sha256 h;
    int64_t size = 0;
    Status s;
    size_t n;
    while (s.ok() && (n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
      h.Update(buf.data(), n);
      s = WriteAll(out, buf.data(), n, dst.string());
      size += static_cast<int64_t>(n);
    }
    std::fclose(in);
    if (std::fclose(out) != 0 && s.ok())
      s = InvalidArgument(ErrnoMessage("writing " + dst.string()));
    RETURN_IF_ERROR(s);
    files->push_back({rel, size, h.Hex()});
  }
  if (ec) return InvalidArgument("reading " + src.string() + ": " + ec.message());
  return Status::Ok();
}

// --- download ---

struct Download {
  FILE* f = nullptr;
  CURL* curl = nullptr;
  int64_t offset = 0;  // bytes already in the .part file
  bool first = true;
  bool restarted = false;
  bool write_error = false;
  int write_errno = 0;
  int64_t received = 0;
};

size_t OnData(char* p, size_t size, size_t n, void* user) {
  auto* d = static_cast<Download*>(user);
  if (d->first) {
    d->first = false;
    long code = 0;
    curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &code);
    if (d->offset > 0 && code == 200) {  // the server ignored the range: start over
      if (std::fflush(d->f) != 0 || ::ftruncate(fileno(d->f), 0) != 0 ||
          std::fseek(d->f, 0, SEEK_SET) != 0) {
        d->write_error = true;
        d->write_errno = errno;
        return 0;
      }
      d->offset = 0;
      d->restarted = true;
    }
  }
  const size_t bytes = size * n;
  if (std::fwrite(p, 1, bytes, d->f) != bytes) {
    d->write_error = true;
    d->write_errno = errno;
    return 0;
  }
  d->received += static_cast<int64_t>(bytes);
  return bytes;
}

// Fetches `url` into `part`, continuing what is there. *resumed: bytes were kept.
Status Fetch(const std::string& url, const std::string& part, bool* resumed) {
  static const bool init = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!init) return Internal("curl_global_init failed");
  std::error_code ec;
  const int64_t have = fs::exists(part, ec) ? static_cast<int64_t>(fs::file_size(part, ec)) : 0;
  Download d;
  d.f = std::fopen(part.c_str(), "ab");
  if (!d.f) return InvalidArgument(ErrnoMessage("cannot create " + part));
  d.offset = have;
  d.curl = curl_easy_init();
  curl_easy_setopt(d.curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(d.curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(d.curl, CURLOPT_PROTOCOLS_STR, "http,https,file");
  curl_easy_setopt(d.curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(d.curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(d.curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(d.curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(d.curl, CURLOPT_LOW_SPEED_LIMIT, 1L);  // stalled for a minute: fail
  curl_easy_setopt(d.curl, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(d.curl, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(d.curl, CURLOPT_WRITEDATA, &d);
  if (have > 0) curl_easy_setopt(d.curl, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(d.curl, CURLOPT_ERRORBUFFER, err);
  const CURLcode rc = curl_easy_perform(d.curl);
  long code = 0;
  curl_easy_getinfo(d.curl, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(d.curl);
  const bool closed = std::fclose(d.f) == 0;
  *resumed = have > 0 && !d.restarted;
  if (d.write_error) {
    errno = d.write_errno;
    fs::remove(part, ec);
    return InvalidArgument(ErrnoMessage("writing " + part));
  }
  if (!closed) {
    fs::remove(part, ec);
    return InvalidArgument(ErrnoMessage("writing " + part));
  }
  if (code == 416 && have > 0) return Status::Ok();  // already whole: the checks will tell
  if (rc != CURLE_OK || code >= 400) {
    const bool http_error = code >= 400;
    if (http_error) fs::remove(part, ec);  // nothing to resume from
    const std::string why = http_error ? "HTTP " + std::to_string(code)
                                       : std::string(err[0] ? err : curl_easy_strerror(rc));
    return Status(StatusCode::kUnavailable,
                  "download of " + url + " failed: " + why +
                      (http_error ? ""
                                  : " (" + std::to_string(have + d.received) +
                                        " bytes kept; the next pull resumes them)"));
  }
  return Status::Ok();
}

// --- entries ---

struct Entry {
  std::string key;
  int64_t bytes = 0;
  fs::file_time_type used;
};

std::string ManifestJson(const std::string& source, const std::string& sha, const std::string& root,
                         const std::vector<FileEntry>& files, int64_t bytes) {
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("source", source);
  w.KeyString("sha256", sha);
  w.KeyString("root", root);
  w.KeyInt("bytes", bytes);
  w.Key("files");
  w.BeginArray();
  for (const FileEntry& f : files) {
    w.BeginObject();
    w.KeyString("path", f.path);
    w.KeyInt("size", f.size);
    w.KeyString("sha256", f.sha256);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

struct Manifest {
  std::string sha256, root;
  int64_t bytes = 0;
  std::vector<FileEntry> files;
};

StatusOr<Manifest> ReadManifest(const fs::path& entry) {
  FILE* f = std::fopen((entry / kManifest).c_str(), "rb");
  if (!f) return NotFound("no manifest");
  std::string text;
  char b[1 << 14];
  size_t n;
  while ((n = std::fread(b, 1, sizeof(b), f)) > 0) text.append(b, n);
  std::fclose(f);
  ASSIGN_OR_RETURN(simdjson::dom::object o, io::ParseObject(text));
  Manifest m;
  std::string_view s;
  simdjson::dom::array files;
  if (o["sha256"].get(s)) return InvalidArgument("manifest: sha256");
  m.sha256 = std::string(s);
  if (o["root"].get(s)) return InvalidArgument("manifest: root");
  m.root = std::string(s);
  if (o["bytes"].get(m.bytes) || o["files"].get(files)) return InvalidArgument("manifest");
  for (auto x : files) {
    FileEntry e;
    if (x["path"].get(s)) return InvalidArgument("manifest: path");
    e.path = std::string(s);
    if (x["size"].get(e.size) || x["sha256"].get(s)) return InvalidArgument("manifest: file");
    e.sha256 = std::string(s);
    m.files.push_back(std::move(e));
  }
  return m;
}

bool SizesMatch(const fs::path& entry, const Manifest& m) {
  std::error_code ec;
  for (const FileEntry& f : m.files) {
    const auto size = fs::file_size(entry / f.path, ec);
    if (ec || static_cast<int64_t>(size) != f.size) return false;
  }
  return true;
}

std::vector<Entry> Entries(const fs::path& models) {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(models, ec)) {
    auto m = ReadManifest(d.path());
    if (!m.ok()) continue;
    Entry e;
    e.key = d.path().filename().string();
    e.bytes = m->bytes;
    e.used = fs::last_write_time(d.path() / kManifest, ec);
    out.push_back(std::move(e));
  }
  return out;
}

std::string Human(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(b) / (1 << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(b) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld bytes", static_cast<long long>(b));
  }
  return buf;
}

bool IsUrl(std::string_view s) {
  return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0 || s.rfind("file://", 0) == 0;
}

bool IsArchiveName(std::string_view s) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst"}) {
    if (s.size() > ext.size() && s.substr(s.size() - ext.size()) == ext) return true;
  }
  return false;
}

bool IsHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::atomic<int> tmp_counter{0};

struct CacheCounters {
  std::atomic<int64_t> hits{0}, misses{0}, errors{0}, bytes{0}, size{0};
  std::atomic<int64_t> micros{0};  // pull time
};
CacheCounters& Counters() {
  static CacheCounters c;
  return c;
}

}  // namespace

std::string RenderCacheMetrics() {
  const CacheCounters& c = Counters();
  std::string out =
      "# HELP sluice_model_cache_requests_total Model cache pulls by result (hit, miss = "
      "materialised now, error).\n"
      "# TYPE sluice_model_cache_requests_total counter\n";
  for (auto [result, n] :
       {std::pair{"hit", &c.hits}, std::pair{"miss", &c.misses}, std::pair{"error", &c.errors}}) {
    out += std::string("sluice_model_cache_requests_total{result=\"") + result + "\"} " +
           std::to_string(n->load()) + "\n";
  }
  char secs[64];
  std::snprintf(secs, sizeof(secs), "%.6f", static_cast<double>(c.micros.load()) / 1e6);
  out +=
      "# HELP sluice_model_cache_bytes_total Bytes of model files materialised by misses.\n"
      "# TYPE sluice_model_cache_bytes_total counter\n"
      "sluice_model_cache_bytes_total " +
      std::to_string(c.bytes.load()) +
      "\n"
      "# HELP sluice_model_cache_pull_seconds_total Time spent in pulls (hits included).\n"
      "# TYPE sluice_model_cache_pull_seconds_total counter\n"
      "sluice_model_cache_pull_seconds_total " +
      secs +
      "\n"
      "# HELP sluice_model_cache_bytes Bytes of every cache entry after the last pull.\n"
      "# TYPE sluice_model_cache_bytes gauge\n"
      "sluice_model_cache_bytes " +
      std::to_string(c.size.load()) + "\n";
  return out;
}

bool IsCacheSource(std::string_view source) {
  const size_t hash = source.find("#sha256=");
  const std::string_view s = source.substr(0, hash);
  return IsUrl(s) || IsArchiveName(s);
}

StatusOr<ModelCache> ModelCache::Open(CacheOptions options) {
  if (options.dir.empty()) return InvalidArgument("the model cache needs a directory");
  if (options.max_bytes < 0) return InvalidArgument("--cache-max-bytes must be >= 0");
  std::error_code ec;
  for (const char* sub : {"models", "tmp", "locks"}) {
    fs::create_directories(fs::path(options.dir) / sub, ec);
    if (ec) {
      return InvalidArgument("cannot create the model cache " + options.dir + ": " + ec.message());
    }
  }
  options.dir = fs::canonical(options.dir, ec).string();
  return ModelCache(std::move(options));
}

int64_t ModelCache::TotalBytes() const {
  int64_t t = 0;
  for (const Entry& e : Entries(fs::path(options_.dir) / "models")) t += e.bytes;
  return t;
}

StatusOr<PullResult> ModelCache::Pull(const std::string& source, std::string expected) const {
  const double t0 = Now();
  auto r = PullUncounted(source, std::move(expected));
  CacheCounters& c = Counters();
  c.micros += static_cast<int64_t>((Now() - t0) * 1e6);
  if (!r.ok()) {
    ++c.errors;
    return r;
  }
  ++(r->hit ? c.hits : c.misses);
  if (!r->hit) c.bytes += r->bytes;
  c.size = TotalBytes();
  return r;
}

StatusOr<PullResult> ModelCache::PullUncounted(const std::string& source_in,
                                               std::string expected) const {
  const double t0 = Now();
  std::string source = source_in;
  if (const size_t h = source.find("#sha256="); h != std::string::npos) {
    if (expected.empty()) expected = source.substr(h + 8);
    source = source.substr(0, h);
  }
  std::transform(expected.begin(), expected.end(), expected.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!expected.empty() && !IsHex64(expected)) {
    return InvalidArgument("sha256: \"" + expected + "\" is not 64 hexadecimal digits");
  }
  const bool url = IsUrl(source);
  std::error_code ec;
  std::string canonical = source;
  if (!url) {
    if (!fs::exists(source, ec))
      return NotFound("model source " + source + ": no such file or directory");
    canonical = fs::canonical(source, ec).string();
  }
  const std::string key = HashOf(canonical).substr(0, 32);
  const fs::path root(options_.dir);
  const fs::path entry = root / "models" / key;
  PullResult res;

  ASSIGN_OR_RETURN(auto lock, FileLock::Take((root / "locks" / (key + ".lock")).string(), LOCK_EX));
  // Cached?
  if (auto m = ReadManifest(entry); m.ok()) {
    if ((expected.empty() || m->sha256 == expected) && SizesMatch(entry, *m)) {
      fs::last_write_time(entry / kManifest, fs::file_time_type::clock::now(), ec);
      res.path = (m->root.empty() ? entry : entry / m->root).string();
      if (auto use = FileLock::Take((root / "locks" / (key + ".use")).string(), LOCK_SH);
          use.ok()) {
        res.in_use = std::shared_ptr<const void>(std::move(use).value());
      }
      res.hit = true;
      res.bytes = m->bytes;
      res.sha256 = m->sha256;
      res.seconds = Now() - t0;
      return res;
    }
    fs::remove_all(entry, ec);  // changed, damaged or another checksum: fetched again
  }

  const std::string part = (root / "tmp" / (key + ".part")).string();
  const fs::path tmp =
      root / "tmp" /
      (key + "." + std::to_string(::getpid()) + "." + std::to_string(tmp_counter++) + ".d");
  fs::create_directories(tmp, ec);
  if (ec) return InvalidArgument("cannot create " + tmp.string() + ": " + ec.message());
  auto cleanup = [&] { fs::remove_all(tmp, ec); };
  std::vector<FileEntry> files;
  std::string sha;
  Status s;
  if (url) {
    s = Fetch(source, part, &res.resumed);
    if (s.ok() && !expected.empty()) {
      auto got = HashFile(part);
      if (!got.ok()) {
        s = got.status();
      } else if (*got != expected) {
        fs::remove(part, ec);
        s = InvalidArgument("checksum mismatch for " + source + ": SHA-256 " + *got +
                            ", expected " + expected + " (the download was discarded)");
      } else {
        sha = *got;
      }
    }
    if (s.ok()) {
      s = ExtractArchive(part, tmp, &files, &sha);
      if (!s.ok()) s = s.WithContext(source + " (the download was discarded)");
      fs::remove(part, ec);  // extracted, or unusable: never resumed from
    }
  } else if (fs::is_directory(canonical, ec)) {
    s = CopyDirectory(canonical, tmp, &files);
    if (s.ok()) {
      std::sort(files.begin(), files.end(),
                [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
      std::string list;
      for (const FileEntry& f : files) list += f.path + " " + f.sha256 + "\n";
      sha = HashOf(list);
      if (!expected.empty() && sha != expected) {
        s = InvalidArgument("checksum mismatch for " + source + ": SHA-256 of its file list " +
                            sha + ", expected " + expected);
      }
    }
  } else {
    if (!expected.empty()) {
      auto got = HashFile(canonical);
      if (!got.ok()) {
        s = got.status();
      } else if (*got != expected) {
        s = InvalidArgument("checksum mismatch for " + source + ": SHA-256 " + *got +
                            ", expected " + expected);
      } else {
        sha = *got;
      }
    }
    if (s.ok()) s = ExtractArchive(canonical, tmp, &files, &sha);
    if (!s.ok()) s = s.WithContext(source);
  }
  if (!s.ok()) {
    cleanup();
    return s;
  }
  int64_t bytes = 0;
  for (const FileEntry& f : files) bytes += f.size;
  // One top-level directory and nothing else: the model is that directory.
  std::string model_root;
  {
    std::vector<fs::path> top;
    for (const auto& d : fs::directory_iterator(tmp, ec)) top.push_back(d.path());
    if (top.size() == 1 && fs::is_directory(top[0])) model_root = top[0].filename().string();
  }
  if (files.empty()) {
    cleanup();
    return InvalidArgument("model source " + source + " holds no files");
  }
  // Room under the limit: evict the least recently used entries no pull holds.
  if (options_.max_bytes > 0) {
    if (bytes > options_.max_bytes) {
      cleanup();
      return Status(StatusCode::kResourceExhausted,
                    "model source " + source + " needs " + Human(bytes) +
                        ", more than --cache-max-bytes " + Human(options_.max_bytes));
    }
    std::vector<Entry> all = Entries(root / "models");
    std::sort(all.begin(), all.end(),
              [](const Entry& a, const Entry& b) { return a.used < b.used; });
    int64_t total = 0;
    for (const Entry& e : all) total += e.bytes;
    for (const Entry& e : all) {
      if (total + bytes <= options_.max_bytes) break;
      if (e.key == key) continue;
      auto held = FileLock::Take((root / "locks" / (e.key + ".lock")).string(), LOCK_EX | LOCK_NB);
      if (!held.ok()) continue;
      auto use = FileLock::Take((root / "locks" / (e.key + ".use")).string(), LOCK_EX | LOCK_NB);
      if (!use.ok()) continue;  // a server is serving it
      fs::remove_all(root / "models" / e.key, ec);
      total -= e.bytes;
    }
    if (total + bytes > options_.max_bytes) {
      cleanup();
      return Status(StatusCode::kResourceExhausted, "model source " + source + " needs " +
                                                        Human(bytes) + "; --cache-max-bytes " +
                                                        Human(options_.max_bytes) + " holds " +
                                                        Human(total) + " of entries in use");
    }
  }
  // The manifest, then the atomic rename.
  {
    const std::string text = ManifestJson(source, sha, model_root, files, bytes);
    const fs::path mp = tmp / kManifest;
    FILE* f = std::fopen(mp.c_str(), "wb");
    Status ws = f ? WriteAll(f, text.data(), text.size(), mp.string())
                  : InvalidArgument(ErrnoMessage("cannot create " + mp.string()));
    if (f && std::fclose(f) != 0 && ws.ok())
      ws = InvalidArgument(ErrnoMessage("writing " + mp.string()));
    if (!ws.ok()) {
      cleanup();
      return ws;
    }
  }
  fs::remove_all(entry, ec);
  fs::rename(tmp, entry, ec);
  if (ec) {
    cleanup();
    return InvalidArgument("cannot install " + entry.string() + ": " + ec.message());
  }
  res.path = (model_root.empty() ? entry : entry / model_root).string();
  if (auto use = FileLock::Take((root / "locks" / (key + ".use")).string(), LOCK_SH); use.ok()) {
    res.in_use = std::shared_ptr<const void>(std::move(use).value());
  }
  res.bytes = bytes;
  res.sha256 = sha;
  res.seconds = Now() - t0;
  return res;
}

Status ModelCache::Verify(const std::string& source_in) const {
  std::string source = source_in.substr(0, source_in.find("#sha256="));
  std::error_code ec;
  const std::string canonical = IsUrl(source) ? source : fs::canonical(source, ec).string();
  const fs::path entry = fs::path(options_.dir) / "models" / HashOf(canonical).substr(0, 32);
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(entry));
  for (const FileEntry& f : m.files) {
    ASSIGN_OR_RETURN(std::string got, HashFile((entry / f.path).string()));
    if (got != f.sha256) {
      return InvalidArgument("cached " + f.path + " of " + source + ": SHA-256 " + got +
                             ", the manifest says " + f.sha256);
    }
  }
  return Status::Ok();
}

}  // namespace sluice::serving
