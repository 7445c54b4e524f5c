// MediaFetcher against a small HTTP/1.1 server on this machine (keep-alive, redirects, slow,
// oversized and missing resources), the SSRF guard (loopback, private, link-local/metadata
// and IPv6 loopback addresses, a DNS name resolving to loopback, a redirect to a refused
// address: refused before any byte is sent, checked by the server's request log), data:
// URIs and local files under an allowed directory (symlinks and ".." out of it refused).
#include "media/fetch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::media {
namespace {

// Listens on 0.0.0.0 (so that 127.0.0.2 would reach it: the guard must refuse before).
class TestServer {
 public:
  TestServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 64);
    accept_ = std::thread([this] { Accept(); });
  }
  ~TestServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    accept_.join();
    for (auto& t : conns_) t.join();
  }
  int port() const { return port_; }
  std::string url(const std::string& path, const std::string& host = "127.0.0.1") const {
    return "http://" + host + ":" + std::to_string(port_) + path;
  }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> l(mu_);
    return log_;
  }
  int connections() const { return connections_.load(); }
  int max_parallel() const { return max_parallel_.load(); }

 private:
  void Accept() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections_;
      std::lock_guard<std::mutex> l(mu_);
      conns_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    std::string buf;
    char tmp[4096];
    while (true) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = recv(c, tmp, sizeof(tmp), 0);
        if (n <= 0) {
          close(c);
          return;
        }
        buf.append(tmp, static_cast<size_t>(n));
      }
      const std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      const std::string path = head.substr(4, head.find(' ', 4) - 4);
      {
        std::lock_guard<std::mutex> l(mu_);
        log_.push_back(path);
      }
      const int now = ++in_flight_;
      int prev = max_parallel_.load();
      while (now > prev && !max_parallel_.compare_exchange_weak(prev, now)) {
      }
      Respond(c, path);
      --in_flight_;
    }
  }
  static void Send(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void Respond(int c, const std::string& path) {
    auto ok = [&](const std::string& body) {
      Send(c, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nContent-Type: image/png\r\n\r\n" + body);
    };
    if (path.rfind("/fast", 0) == 0) {
      ok("FAST:" + path);
    } else if (path.rfind("/img", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ok("IMAGE-BYTES:" + path);
    } else if (path == "/redirect") {
      Send(c, "HTTP/1.1 302 Found\r\nLocation: /img-after\r\nContent-Length: 0\r\n\r\n");
    } else if (path == "/redirect-private") {
      Send(c, "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:" + std::to_string(port_) +
                  "/secret\r\nContent-Length: 0\r\n\r\n");
    } else if (path == "/redirect-ftp") {
      Send(c, "HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1/x\r\nContent-Length: 0\r\n\r\n");
    } else if (path == "/loop") {
      Send(c, "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n");
    } else if (path == "/slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ok("late");
    } else if (path == "/big") {
      Send(c, "HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n");
      Send(c, std::string(5000000, 'x'));
    } else if (path.rfind("/mb", 0) == 0) {
      ok(std::string(1500000, path.back()));  // 1.5 MB of the path's last character
    } else if (path == "/big-chunked") {
      Send(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
      const std::string chunk(65536, 'y');
      for (int i = 0; i < 40; ++i) {
        char len[32];
        std::snprintf(len, sizeof(len), "%zx\r\n", chunk.size());
        Send(c, len + chunk + "\r\n");
      }
      Send(c, "0\r\n\r\n");
    } else {
      Send(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
  std::vector<std::string> log_;
  std::atomic<int> connections_{0}, in_flight_{0}, max_parallel_{0};
};

FetchOptions Loopback() {
  FetchOptions o;
  o.allowed_addresses = {"127.0.0.1"};  // the test server, and nothing else private
  o.max_bytes = 1 << 20;
  o.total_timeout_ms = 800;
  return o;
}

std::string Message(const StatusOr<std::string>& r) {
  return r.ok() ? "(ok)" : r.status().message();
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Fetch, GuardClassifiesAddresses) {
  for (const char* a : {"127.0.0.1",
                        "127.8.9.10",
                        "10.0.0.1",
                        "172.16.5.4",
                        "172.31.255.255",
                        "192.168.1.1",
                        "169.254.169.254",
                        "100.64.0.1",
                        "0.0.0.0",
                        "224.0.0.1",
                        "255.255.255.255",
                        "::1",
                        "::",
                        "fe80::1",
                        "fd00:ec2::254",
                        "fc00::1",
                        "ff02::1",
                        "::ffff:127.0.0.1",
                        "::ffff:10.0.0.1",
                        "64:ff9b::a9fe:a9fe",
                        "not an address"}) {
    EXPECT_TRUE(IsPrivateAddress(a)) << a;
  }
  for (const char* a : {"8.8.8.8", "1.1.1.1", "172.32.0.1", "192.169.0.1", "100.128.0.1",
                        "2606:4700:4700::1111", "::ffff:8.8.8.8"}) {
    EXPECT_FALSE(IsPrivateAddress(a)) << a;
  }
}

TEST(Fetch, FetchesInParallelWithKeepAlive) {
  TestServer server;
  FetchOptions o = Loopback();
  o.concurrency = 4;
  MediaFetcher fetcher(o);
  std::vector<std::string> urls;
  for (int i = 0; i < 20; ++i) urls.push_back(server.url("/img" + std::to_string(i)));
  auto r = fetcher.FetchAll(urls);
  ASSERT_EQ(r.size(), urls.size());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(r[i].ok()) << Message(r[i]);
    EXPECT_EQ(*r[i], "IMAGE-BYTES:/img" + std::to_string(i));  // in order
  }
  EXPECT_LE(server.max_parallel(), 4);
  EXPECT_GE(server.max_parallel(), 2);
  const int conns = server.connections();
  EXPECT_LE(conns, 4);  // reused within the call
  auto again = fetcher.FetchAll({server.url("/img-a"), server.url("/img-b")});
  ASSERT_TRUE(again[0].ok() && again[1].ok());
  EXPECT_EQ(server.connections(), conns);  // and across calls (keep-alive)
}

// Many request threads fetching at once through one fetcher (the served CLIP path: one
// FetchAll per request on the request workers). libcurl must never see one connection cache
// from two threads (it crashed in curl_multi_perform); every body arrives intact and in
// order, and connections are still reused across calls.
TEST(Fetch, ConcurrentCallsFromManyThreads) {
  TestServer server;
  FetchOptions o = Loopback();
  o.concurrency = 4;
  o.total_timeout_ms = 10000;
  MediaFetcher fetcher(o);
  constexpr int kThreads = 16, kCalls = 40, kPerCall = 10;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        std::vector<std::string> urls;
        for (int k = 0; k < kPerCall; ++k) {
          urls.push_back(server.url("/fast-" + std::to_string(t) + "-" + std::to_string(c) + "-" +
                                    std::to_string(k)));
        }
        auto r = fetcher.FetchAll(urls);
        for (int k = 0; k < kPerCall; ++k) {
          const std::string want =
              "FAST:/fast-" + std::to_string(t) + "-" + std::to_string(c) + "-" + std::to_string(k);
          if (!r[k].ok() || *r[k] != want) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(server.requests().size(), static_cast<size_t>(kThreads * kCalls * kPerCall));
  // Keep-alive across calls: far fewer connections than transfers (each pooled multi handle
  // holds at most `concurrency` connections to this host).
  EXPECT_LE(server.connections(), kThreads * o.concurrency * 2);
}

// A body given back with Recycle is the memory of the next download of an announced size
// that fits it (its pages already mapped); small bodies are not kept, and what is kept stays
// under kRecycleBytes.
TEST(Fetch, RecycledBodiesAreReusedAndBounded) {
  TestServer server;
  FetchOptions o = Loopback();
  o.max_bytes = 4 << 20;
  MediaFetcher fetcher(o);
  auto first = fetcher.FetchAll({server.url("/mba")});
  ASSERT_TRUE(first[0].ok()) << Message(first[0]);
  ASSERT_EQ(first[0]->size(), 1500000u);
  const char* memory = first[0]->data();
  EXPECT_EQ(fetcher.RecycledBytesForTesting(), 0u);
  fetcher.Recycle(std::move(*first[0]));
  EXPECT_GE(fetcher.RecycledBytesForTesting(), 1500000u);
  auto second = fetcher.FetchAll({server.url("/mbb")});
  ASSERT_TRUE(second[0].ok()) << Message(second[0]);
  EXPECT_EQ(second[0]->data(), memory);  // the recycled body, refilled
  EXPECT_EQ(*second[0], std::string(1500000, 'b'));
  EXPECT_EQ(fetcher.RecycledBytesForTesting(), 0u);
  // Small bodies are left to malloc; the pool never holds more than kRecycleBytes.
  fetcher.Recycle(std::string(1000, 'x'));
  EXPECT_EQ(fetcher.RecycledBytesForTesting(), 0u);
  for (int i = 0; i < 100; ++i) {
    std::string b;
    b.reserve(2 << 20);
    fetcher.Recycle(std::move(b));
    EXPECT_LE(fetcher.RecycledBytesForTesting(), MediaFetcher::kRecycleBytes);
  }
  EXPECT_GT(fetcher.RecycledBytesForTesting(), MediaFetcher::kRecycleBytes / 2);
  // Neither a chunked body (no announced size) nor a small one is taken from the pool.
  const size_t kept = fetcher.RecycledBytesForTesting();
  auto small = fetcher.FetchAll({server.url("/fast-small")});
  ASSERT_TRUE(small[0].ok()) << Message(small[0]);
  EXPECT_EQ(fetcher.RecycledBytesForTesting(), kept);
  auto chunked = fetcher.FetchAll({server.url("/big-chunked")});
  ASSERT_TRUE(chunked[0].ok()) << Message(chunked[0]);
  EXPECT_EQ(fetcher.RecycledBytesForTesting(), kept);
}

TEST(Fetch, FailuresNameTheSourceAndTheReason) {
  TestServer server;
  MediaFetcher fetcher(Loopback());
  auto r = fetcher.FetchAll({server.url("/missing"), server.url("/redirect"), server.url("/slow"),
                             server.url("/big"), server.url("/big-chunked"), server.url("/loop"),
                             server.url("/redirect-ftp"), "ftp://example.com/x.png",
                             "http://no-such-host.invalid/x.png", "relative/path.png"});
  ASSERT_EQ(r.size(), 10u);
  EXPECT_TRUE(Contains(Message(r[0]), "HTTP status 404")) << Message(r[0]);
  EXPECT_TRUE(Contains(Message(r[0]), server.url("/missing"))) << Message(r[0]);
  ASSERT_TRUE(r[1].ok()) << Message(r[1]);
  EXPECT_EQ(*r[1], "IMAGE-BYTES:/img-after");
  EXPECT_TRUE(Contains(Message(r[2]), "timed out")) << Message(r[2]);
  EXPECT_TRUE(Contains(Message(r[3]), "larger than the limit")) << Message(r[3]);
  EXPECT_TRUE(Contains(Message(r[4]), "larger than the limit")) << Message(r[4]);
  EXPECT_TRUE(Contains(Message(r[5]), "redirects")) << Message(r[5]);
  EXPECT_TRUE(Contains(Message(r[6]), "only http and https")) << Message(r[6]);
  EXPECT_TRUE(Contains(Message(r[7]), "not an http(s) URL")) << Message(r[7]);
  EXPECT_TRUE(Contains(Message(r[8]), "resolve")) << Message(r[8]);
  EXPECT_TRUE(Contains(Message(r[9]), "not an http(s) URL")) << Message(r[9]);
  for (const auto& x : r) {
    if (!x.ok()) {
      EXPECT_EQ(x.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(Fetch, GuardRefusesBeforeSendingAnything) {
  TestServer server;
  FetchOptions strict = Loopback();
  strict.allowed_addresses.clear();
  strict.connect_timeout_ms = 300;
  MediaFetcher fetcher(strict);
  const std::string port = std::to_string(server.port());
  auto r = fetcher.FetchAll(
      {server.url("/img1"), server.url("/img2", "localhost"), "http://[::1]:" + port + "/img3",
       "http://10.0.0.1/img4", "http://169.254.169.254/latest/meta-data/",
       "http://127.0.0.2:" + port + "/img5", "http://0.0.0.0:" + port + "/img6"});
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_TRUE(Contains(Message(r[i]), "refused")) << i << ": " << Message(r[i]);
    EXPECT_TRUE(Contains(Message(r[i]), "--allow-private-media-urls")) << Message(r[i]);
  }
  EXPECT_TRUE(server.requests().empty());
  // A redirect from an allowed host to a refused one: the first hop is served, the second
  // never reaches the server.
  MediaFetcher loop(Loopback());
  auto red = loop.FetchAll({server.url("/redirect-private")});
  EXPECT_TRUE(Contains(Message(red[0]), "refused: the address 127.0.0.2")) << Message(red[0]);
  EXPECT_EQ(server.requests(), std::vector<std::string>{"/redirect-private"});
  // With --allow-private-media-urls everything on loopback is allowed.
  FetchOptions open = strict;
  open.allow_private = true;
  MediaFetcher all(open);
  auto ok = all.FetchAll({server.url("/img7", "localhost"), "http://127.0.0.2:" + port + "/img8"});
  EXPECT_TRUE(ok[0].ok()) << Message(ok[0]);
  EXPECT_TRUE(ok[1].ok()) << Message(ok[1]);
}

TEST(Fetch, DataUris) {
  const std::string png = "\x89PNG\r\n\x1a\n";
  auto b64 = DecodeDataUri("data:image/png;base64,iVBORw0KGgo=", 100);
  ASSERT_TRUE(b64.ok()) << b64.status().ToString();
  EXPECT_EQ(*b64, png);
  auto nopad = DecodeDataUri("data:image/png;base64,iVBORw0KGgo", 100);
  ASSERT_TRUE(nopad.ok());
  EXPECT_EQ(*nopad, png);
  auto pct = DecodeDataUri("data:,a%20b%2Cc", 100);
  ASSERT_TRUE(pct.ok());
  EXPECT_EQ(*pct, "a b,c");
  EXPECT_FALSE(DecodeDataUri("data:image/png;base64,iVBO*w0K", 100).ok());
  EXPECT_FALSE(DecodeDataUri("data:image/png;base64,iV=BO", 100).ok());
  EXPECT_FALSE(DecodeDataUri("data:image/png;base64", 100).ok());
  auto big = DecodeDataUri("data:;base64," + std::string(4000, 'A'), 100);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(Contains(big.status().message(), "larger than the limit"));
  EXPECT_TRUE(Contains(big.status().message(), "data:;base64,AAAA"));  // shortened
  EXPECT_LT(big.status().message().size(), 200u);
  MediaFetcher fetcher(Loopback());
  auto r = fetcher.FetchAll({"data:image/png;base64,iVBORw0KGgo="});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(*r[0], png);
}

TEST(Fetch, LocalFilesOnlyUnderTheAllowedDirectory) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("sluice_fetch_" + std::to_string(getpid()));
  fs::create_directories(root / "sub");
  std::ofstream(root / "sub" / "a.png") << "PNGDATA";
  fs::create_symlink("/etc/hostname", root / "escape.png");
  FetchOptions none = Loopback();
  MediaFetcher no_local(none);
  auto refused = no_local.FetchAll({(root / "sub" / "a.png").string()});
  EXPECT_TRUE(Contains(Message(refused[0]), "--allowed-local-media-path")) << Message(refused[0]);
  FetchOptions o = Loopback();
  o.local_root = root.string();
  MediaFetcher fetcher(o);
  auto r = fetcher.FetchAll({(root / "sub" / "a.png").string(),
                             "file://" + (root / "sub" / "a.png").string(),
                             (root / "escape.png").string(),
                             (root / "sub" / ".." / ".." / ".." / "etc" / "passwd").string(),
                             (root / ".." / "no-such-dir" / "x.png").string(), "/etc/passwd",
                             (root / "nope.png").string(), (root / "sub").string()});
  ASSERT_TRUE(r[0].ok()) << Message(r[0]);
  EXPECT_EQ(*r[0], "PNGDATA");
  ASSERT_TRUE(r[1].ok()) << Message(r[1]);
  EXPECT_TRUE(Contains(Message(r[2]), "outside the allowed media directory")) << Message(r[2]);
  EXPECT_TRUE(Contains(Message(r[3]), "outside the allowed media directory")) << Message(r[3]);
  EXPECT_TRUE(Contains(Message(r[4]), "outside the allowed media directory")) << Message(r[4]);
  EXPECT_TRUE(Contains(Message(r[5]), "outside the allowed media directory")) << Message(r[5]);
  EXPECT_TRUE(Contains(Message(r[6]), "no such file")) << Message(r[6]);
  EXPECT_TRUE(Contains(Message(r[7]), "not a regular file")) << Message(r[7]);
  fs::remove_all(root);
}

}  // namespace
}  // namespace sluice::media
