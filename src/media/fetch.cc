#include "media/fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/recycle_pool.h"

namespace sluice::media {

namespace {

bool V4Private(uint32_t a) {  // host byte order
  auto in = [&](uint32_t net, int bits) {
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    return (a & mask) == (net & mask);
  };
  return in(0x00000000, 8) ||   // "this" network, unspecified
         in(0x0A000000, 8) ||   // 10/8
         in(0x64400000, 10) ||  // 100.64/10 carrier-grade NAT
         in(0x7F000000, 8) ||   // loopback
         in(0xA9FE0000, 16) ||  // link-local, cloud metadata 169.254.169.254
         in(0xAC100000, 12) ||  // 172.16/12
         in(0xC0000000, 24) ||  // 192.0.0/24 IETF protocol assignments
         in(0xC0000200, 24) ||  // 192.0.2/24 documentation
         in(0xC0A80000, 16) ||  // 192.168/16
         in(0xC6120000, 15) ||  // 198.18/15 benchmarking
         in(0xC6336400, 24) ||  // 198.51.100/24 documentation
         in(0xCB007100, 24) ||  // 203.0.113/24 documentation
         in(0xE0000000, 4) ||   // multicast
         in(0xF0000000, 4);     // reserved, broadcast
}

bool V6Private(const uint8_t* b) {
  static const uint8_t zero[16] = {0};
  if (std::memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1)) return true;  // ::, ::1
  auto v4 = [&](int at) {
    return V4Private((uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) |
                     (uint32_t{b[at + 2]} << 8) | b[at + 3]);
  };
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(b, mapped, 12) == 0) return v4(12);  // ::ffff:a.b.c.d
  static const uint8_t nat64[12] = {0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, nat64, 12) == 0) return v4(12);       // 64:ff9b::a.b.c.d
  if (std::memcmp(b, zero, 12) == 0) return true;          // deprecated IPv4-compatible
  if ((b[0] & 0xFE) == 0xFC) return true;                  // fc00::/7 unique local
  if (b[0] == 0xFE && (b[1] & 0xC0) == 0x80) return true;  // fe80::/10 link-local
  if (b[0] == 0xFE && (b[1] & 0xC0) == 0xC0) return true;  // fec0::/10 site-local
  if (b[0] == 0xFF) return true;                           // multicast
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8) return true;  // 2001:db8::/32
  return false;
}

bool SockaddrPrivate(const sockaddr* sa, std::string* text) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *text = buf;
    return V4Private(ntohl(in->sin_addr.s_addr));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *text = buf;
    return V6Private(in6->sin6_addr.s6_addr);
  }
  *text = "(address family " + std::to_string(sa->sa_family) + ")";
  return true;
}

std::string Shown(const std::string& src) {
  if (src.rfind("data:", 0) == 0 && src.size() > 40) return src.substr(0, 32) + "...";
  return src;
}

Status SourceError(const std::string& src, const std::string& why) {
  return InvalidArgument("image " + Shown(src) + ": " + why);
}

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

StatusOr<std::string> ReadLocal(const std::string& src, const FetchOptions& o) {
  if (o.local_root.empty()) {
    return SourceError(src,
                       "local files are not allowed (start sluice with "
                       "--allowed-local-media-path DIR)");
  }
  std::string path = src.rfind("file://", 0) == 0 ? src.substr(7) : src;
  char root[PATH_MAX], real[PATH_MAX];
  if (realpath(o.local_root.c_str(), root) == nullptr) {
    return SourceError(src, "the allowed media directory " + o.local_root + " does not exist");
  }
  const std::string r(root);
  auto inside = [&](const std::string& p) {
    return p.compare(0, r.size(), r) == 0 &&
           (p.size() == r.size() || p[r.size()] == '/' || r == "/");
  };
  // A missing file outside the directory is reported as outside (nothing is said about
  // what exists there); an existing one is judged by its resolved path (symlinks).
  const std::string lexical = std::filesystem::path(path).lexically_normal().string();
  if (realpath(path.c_str(), real) == nullptr) {
    if (!inside(lexical)) {
      return SourceError(src, "is outside the allowed media directory " + o.local_root);
    }
    return SourceError(src, "no such file");
  }
  if (!inside(real)) {
    return SourceError(src, "is outside the allowed media directory " + o.local_root);
  }
  struct stat st {};
  if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) return SourceError(src, "not a regular file");
  if (st.st_size > o.max_bytes) {
    return SourceError(src, "is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                                std::to_string(o.max_bytes));
  }
  std::ifstream f(real, std::ios::binary);
  std::string data(static_cast<size_t>(st.st_size), '\0');
  if (!f.read(data.data(), st.st_size)) return SourceError(src, "cannot be read");
  return data;
}

// One HTTP(S) transfer of a FetchAll call.
struct Transfer {
  size_t index = 0;
  const std::string* url = nullptr;
  CURL* easy = nullptr;
  std::string body;
  int64_t max_bytes = 0;
  int64_t* call_bytes = nullptr;  // the call's running total
  int64_t call_limit = 0;
  bool allow_private = false;
  const std::vector<std::string>* allowed = nullptr;
  bool over_limit = false, over_call_limit = false, refused = false;
  std::string refused_address;
  // Where a body of an announced size comes from (MediaFetcher's recycled bodies).
  std::string (*take_body)(void* pool, size_t bytes) = nullptr;
  void* pool = nullptr;
};

size_t WriteCb(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (static_cast<int64_t>(t->body.size() + bytes) > t->max_bytes) {
    t->over_limit = true;
    return 0;  // aborts the transfer
  }
  if (*t->call_bytes + static_cast<int64_t>(bytes) > t->call_limit) {
    t->over_call_limit = true;
    return 0;
  }
  *t->call_bytes += static_cast<int64_t>(bytes);
  if (t->body.empty()) {
    // The announced size, where it is within the limit, as one allocation: growing a 4 MB
    // body by doubling copied it twice into fresh pages (a page fault per 4 KiB each time).
    curl_off_t announced = -1;
    if (curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK &&
        announced > 0 && announced <= t->max_bytes) {
      t->body = t->take_body(t->pool, static_cast<size_t>(announced));
    }
  }
  t->body.append(data, bytes);
  return bytes;
}

curl_socket_t OpenSocketCb(void* user, curlsocktype purpose, curl_sockaddr* address) {
  auto* t = static_cast<Transfer*>(user);
  std::string text;
  const bool priv = SockaddrPrivate(&address->addr, &text);
  const bool listed = std::find(t->allowed->begin(), t->allowed->end(), text) != t->allowed->end();
  if (purpose != CURLSOCKTYPE_IPCXN || (priv && !t->allow_private && !listed)) {
    t->refused = true;
    t->refused_address = text;
    return CURL_SOCKET_BAD;  // nothing is sent
  }
  return socket(address->family, address->socktype, address->protocol);
}

Status TransferStatus(const Transfer& t, CURLcode code, const FetchOptions& o) {
  const std::string& url = *t.url;
  if (t.refused) {
    return SourceError(url, "refused: the address " + t.refused_address +
                                " is loopback, private, link-local or otherwise not public "
                                "(start sluice with --allow-private-media-urls to allow it)");
  }
  if (t.over_limit || code == CURLE_FILESIZE_EXCEEDED) {
    return SourceError(
        url, "is larger than the limit of " + std::to_string(o.max_bytes) + " bytes per image");
  }
  if (t.over_call_limit) {
    return SourceError(url, "the request's images together exceed " +
                                std::to_string(o.max_request_bytes) + " bytes");
  }
  switch (code) {
    case CURLE_OK:
      break;
    case CURLE_OPERATION_TIMEDOUT:
      return SourceError(url, "timed out (connect limit " + std::to_string(o.connect_timeout_ms) +
                                  " ms, total " + std::to_string(o.total_timeout_ms) + " ms)");
    case CURLE_TOO_MANY_REDIRECTS:
      return SourceError(url, "more than " + std::to_string(o.max_redirects) + " redirects");
    case CURLE_UNSUPPORTED_PROTOCOL:
      return SourceError(url, "only http and https URLs can be fetched (also when redirected)");
    case CURLE_URL_MALFORMAT:
      return SourceError(url, "malformed URL");
    case CURLE_COULDNT_RESOLVE_HOST:
      return SourceError(url, "cannot resolve the host");
    default:
      return SourceError(url, curl_easy_strerror(code));
  }
  long status = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 400) return SourceError(url, "HTTP status " + std::to_string(status));
  if (status < 200 || status >= 300) {
    return SourceError(url, "unexpected HTTP status " + std::to_string(status));
  }
  return Status::Ok();
}

}  // namespace

// DNS results are shared by every transfer (a CURLSH with locks). Connections are not: libcurl
// does not support one connection cache used by several threads at once (CURL_LOCK_DATA_CONNECT
// across threads is a documented known bug; it crashed `sluice serve` in curl_multi_perform
// under concurrent image requests). Each call takes a multi handle of its own from a pool
// instead; a multi handle keeps its connections between the calls that use it, so keep-alive
// still holds across requests, and at most one thread uses a multi handle at a time.
struct MediaFetcher::Shared {
  CURLSH* share = nullptr;
  std::mutex locks[CURL_LOCK_DATA_LAST];
  std::mutex pool_mu;
  std::vector<CURLM*> idle;  // multi handles no call is using, with their open connections
  // Recycled bodies (MediaFetcher::Recycle), their capacity kRecycleBytes at most in all.
  RecyclePool<std::string> bodies{MediaFetcher::kRecycleBytes, size_t{1} << 20};
  // A kept body of at least `bytes` capacity (the smallest), else a new one reserved.
  std::string TakeBody(size_t bytes) {
    std::string b;
    if (bytes < (size_t{1} << 20)) {  // small (an error page, a thumbnail): malloc's arenas
      b.reserve(bytes);
    } else if (bodies.Take(bytes, &b)) {
      b.clear();
    } else {
      // Rounded up to whole MiB, so that it fits a later body of a similar size once kept.
      b.reserve((bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1));
    }
    return b;
  }
  static std::string Take(void* self, size_t bytes) {
    return static_cast<Shared*>(self)->TakeBody(bytes);
  }
  static constexpr size_t kMaxIdle = 64;
  static void Lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<Shared*>(user)->locks[data].lock();
  }
  static void Unlock(CURL*, curl_lock_data data, void* user) {
    static_cast<Shared*>(user)->locks[data].unlock();
  }
  // A multi handle keeps at most `max_connects` connections open once its transfers are done
  // (libcurl's default is 4 per transfer it ever ran), so idle handles hold a bounded number of
  // sockets: kMaxIdle x max_connects at most.
  CURLM* Acquire(long max_connects) {
    {
      std::lock_guard<std::mutex> l(pool_mu);
      if (!idle.empty()) {
        CURLM* m = idle.back();
        idle.pop_back();
        return m;
      }
    }
    CURLM* m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, max_connects);
    return m;
  }
  void Release(CURLM* m) {
    {
      std::lock_guard<std::mutex> l(pool_mu);
      if (idle.size() < kMaxIdle) {
        idle.push_back(m);
        return;
      }
    }
    curl_multi_cleanup(m);
  }
};

bool IsPrivateAddress(const std::string& ip) {
  in_addr a4{};
  if (inet_pton(AF_INET, ip.c_str(), &a4) == 1) return V4Private(ntohl(a4.s_addr));
  in6_addr a6{};
  if (inet_pton(AF_INET6, ip.c_str(), &a6) == 1) return V6Private(a6.s6_addr);
  return true;
}

StatusOr<std::string> DecodeDataUri(const std::string& uri, int64_t max_bytes) {
  const size_t comma = uri.find(',');
  if (uri.rfind("data:", 0) != 0 || comma == std::string::npos) {
    return SourceError(uri, "malformed data: URI (data:[<media type>][;base64],<data>)");
  }
  const std::string meta = uri.substr(5, comma - 5);
  const bool b64 = meta.size() >= 7 && meta.compare(meta.size() - 7, 7, ";base64") == 0;
  const size_t n = uri.size() - comma - 1;
  if (static_cast<int64_t>(b64 ? n / 4 * 3 : n) > max_bytes + 3) {
    return SourceError(
        uri, "is larger than the limit of " + std::to_string(max_bytes) + " bytes per image");
  }
  std::string out;
  out.reserve(b64 ? n / 4 * 3 + 3 : n);
  if (b64) {
    uint32_t acc = 0;
    int bits = 0;
    size_t pad = 0;
    for (size_t i = comma + 1; i < uri.size(); ++i) {
      const char c = uri[i];
      if (c == '=') {
        ++pad;
        continue;
      }
      const int v = Base64Value(c);
      if (v < 0 || pad > 0) return SourceError(uri, "invalid base64 data");
      acc = (acc << 6) | static_cast<uint32_t>(v);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out.push_back(static_cast<char>((acc >> bits) & 0xFF));
      }
    }
    if (pad > 2 || bits >= 6) return SourceError(uri, "invalid base64 data");
  } else {
    for (size_t i = comma + 1; i < uri.size(); ++i) {
      if (uri[i] == '%' && i + 2 < uri.size() && std::isxdigit(uri[i + 1]) &&
          std::isxdigit(uri[i + 2])) {
        out.push_back(static_cast<char>(std::strtol(uri.substr(i + 1, 2).c_str(), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(uri[i]);
      }
    }
  }
  if (static_cast<int64_t>(out.size()) > max_bytes) {
    return SourceError(
        uri, "is larger than the limit of " + std::to_string(max_bytes) + " bytes per image");
  }
  return out;
}

MediaFetcher::MediaFetcher(FetchOptions options)
    : options_(std::move(options)), shared_(std::make_unique<Shared>()) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  shared_->share = curl_share_init();
  curl_share_setopt(shared_->share, CURLSHOPT_LOCKFUNC, &Shared::Lock);
  curl_share_setopt(shared_->share, CURLSHOPT_UNLOCKFUNC, &Shared::Unlock);
  curl_share_setopt(shared_->share, CURLSHOPT_USERDATA, shared_.get());
  curl_share_setopt(shared_->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
}

MediaFetcher::~MediaFetcher() {
  for (CURLM* m : shared_->idle) curl_multi_cleanup(m);
  if (shared_->share != nullptr) curl_share_cleanup(shared_->share);
}

void MediaFetcher::Recycle(std::string&& body) { shared_->bodies.Keep(std::move(body)); }

size_t MediaFetcher::RecycledBytesForTesting() const { return shared_->bodies.bytes(); }

std::vector<StatusOr<std::string>> MediaFetcher::FetchAll(const std::vector<std::string>& sources) {
  std::vector<StatusOr<std::string>> out(sources.size(), Internal("not fetched"));
  std::vector<Transfer> transfers;
  int64_t call_bytes = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string& s = sources[i];
    if (s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0) {
      Transfer t;
      t.index = i;
      t.url = &s;
      transfers.push_back(std::move(t));
    } else if (s.rfind("data:", 0) == 0) {
      out[i] = DecodeDataUri(s, options_.max_bytes);
    } else if (s.rfind("file://", 0) == 0 || (!s.empty() && s[0] == '/')) {
      out[i] = ReadLocal(s, options_);
    } else {
      out[i] = SourceError(s, "not an http(s) URL, a data: URI or a local file path");
    }
    if (out[i].ok()) call_bytes += static_cast<int64_t>(out[i]->size());
  }
  if (transfers.empty()) return out;
  CURLM* multi = shared_->Acquire(static_cast<long>(std::max(1, options_.concurrency)));
  size_t next = 0, running = 0;
  auto start = [&](Transfer& t) {
    CURL* e = curl_easy_init();
    t.easy = e;
    t.take_body = &Shared::Take;
    t.pool = shared_.get();
    t.max_bytes = options_.max_bytes;
    t.call_bytes = &call_bytes;
    t.call_limit = options_.max_request_bytes;
    t.allow_private = options_.allow_private;
    t.allowed = &options_.allowed_addresses;
    curl_easy_setopt(e, CURLOPT_URL, t.url->c_str());
    curl_easy_setopt(e, CURLOPT_SHARE, shared_->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");  // no proxy: the guard sees the real address
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, static_cast<long>(options_.max_redirects));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.total_timeout_ms));
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options_.max_bytes));
    curl_easy_setopt(e, CURLOPT_USERAGENT, "sluice");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteCb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, OpenSocketCb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, &t);
    curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
    curl_multi_add_handle(multi, e);
    ++running;
  };
  const size_t width = static_cast<size_t>(std::max(1, options_.concurrency));
  while (next < transfers.size() && running < width) start(transfers[next++]);
  while (running > 0) {
    int active = 0;
    curl_multi_perform(multi, &active);
    CURLMsg* msg;
    int left = 0;
    while ((msg = curl_multi_info_read(multi, &left)) != nullptr) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      const Status st = TransferStatus(*t, msg->data.result, options_);
      if (st.ok()) {
        out[t->index] = std::move(t->body);
      } else {
        out[t->index] = st;
      }
      curl_multi_remove_handle(multi, t->easy);
      curl_easy_cleanup(t->easy);
      t->easy = nullptr;
      --running;
      if (next < transfers.size()) start(transfers[next++]);
    }
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  }
  shared_->Release(multi);
  return out;
}

}  // namespace sluice::media
