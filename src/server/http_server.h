// HTTP/1.1 front end on Boost.Beast: keep-alive connections served by a few I/O threads.
// Each complete request goes to the handler (which must return quickly: it runs on an
// I/O thread) with an Exchange to answer on, from any thread. While a request is being
// processed the connection is watched for the client going away (Exchange is then told).
//
// Connections are capped (max_connections, by default the process's file-descriptor limit
// less a reserve): one over the cap is still served one request with HttpRequest::overflow
// set (the service answers health checks and turns the rest away), up to
// kOverflowConnections more; beyond those a connection is closed at once. When accept fails
// for want of file descriptors or memory, the server waits 100 ms before accepting again
// (instead of spinning) and logs the failure at most once a second.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "server/http_types.h"
#include "sluice/status.h"

namespace sluice::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (see port())
  int io_threads = 1;
  int64_t max_body_bytes = 1 << 20;
  int idle_timeout_s = 60;  // keep-alive connections idle longer are closed
  int max_connections = 0;  // 0 = RLIMIT_NOFILE - kFdReserve - kOverflowConnections
};

// File descriptors kept for everything but client connections (model files, logs, threads).
constexpr int kFdReserve = 64;
// Connections over max_connections still served one request (health checks).
constexpr int kOverflowConnections = 32;

using HttpHandler = std::function<void(HttpRequest&&, std::shared_ptr<Exchange>)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  // Binds and starts the I/O threads.
  Status Start();
  int port() const;
  int max_connections() const;  // resolved by Start
  // Stops accepting, closes connections, joins the I/O threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::server
