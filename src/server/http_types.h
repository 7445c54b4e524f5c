// Transport-neutral HTTP request/response types shared by the Beast front end
// (http_server.cc, the only file that includes Boost) and the service.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::string body;
  std::string authorization;  // the Authorization header, if any
  // Set by the transport when the request could not be read whole: 413 (body over
  // --max-body-bytes) or 400 (malformed HTTP). The service answers it with a JSON error.
  int transport_error = 0;
  std::string transport_message;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this response
};

// One request/response exchange. Respond may be called from any thread; the first call
// wins. The transport calls NotifyDisconnected when the client goes away first.
class Exchange {
 public:
  using SendFn = std::function<void(HttpResponse&&)>;
  explicit Exchange(SendFn send) : send_(std::move(send)) {}

  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  // Returns false if a response was already sent.
  bool Respond(HttpResponse r) {
    if (responded_.exchange(true)) return false;
    SendFn send;
    {
      std::lock_guard<std::mutex> lock(mu_);
      send = std::move(send_);
      hook_ = nullptr;
    }
    if (send) send(std::move(r));
    return true;
  }
  bool responded() const { return responded_.load(); }
  bool disconnected() const { return disconnected_.load(); }

  // Runs `hook` when the client disconnects before the response (at once if it already has).
  void OnDisconnect(std::function<void()> hook) {
    std::unique_lock<std::mutex> lock(mu_);
    if (disconnected_.load()) {
      lock.unlock();
      hook();
      return;
    }
    hook_ = std::move(hook);
  }

  void NotifyDisconnected() {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (responded_.load() || disconnected_.exchange(true)) return;
      hook = std::move(hook_);
    }
    if (hook) hook();
  }

 private:
  std::mutex mu_;
  SendFn send_;
  std::function<void()> hook_;
  std::atomic<bool> responded_{false};
  std::atomic<bool> disconnected_{false};
};

}  // namespace sluice::server
