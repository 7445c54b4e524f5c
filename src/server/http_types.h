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
  // The connection came in over --max-connections: the service answers health routes and
  // turns anything else away (503); the connection closes after one response.
  bool overflow = false;
  // Set by the router for a request it rewrote (KServe infer): the route label its metrics
  // are counted under.
  std::string metrics_route;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this response
};

// A piece of a streamed response (server-sent events): the head (status and headers of
// `head`, body unused), one chunk of body bytes, or the end of the body.
struct StreamPiece {
  enum class Kind { kHead, kData, kEnd };
  Kind kind = Kind::kData;
  HttpResponse head;
  std::string data;
};

// One request/response exchange. Respond (or BeginStream) may be called from any thread;
// the first call wins. The transport calls NotifyDisconnected when the client goes away
// first (for a streamed response: any time before its end).
class Exchange {
 public:
  using SendFn = std::function<void(HttpResponse&&)>;
  using StreamFn = std::function<void(StreamPiece&&)>;
  explicit Exchange(SendFn send, StreamFn stream = nullptr)
      : send_(std::move(send)), stream_(std::move(stream)) {}

  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  // The route label the router's metrics count this exchange under, when the transport
  // names it (the gRPC front end: "grpc/ModelInfer", ...); empty = the HTTP route's. Set
  // before the exchange is handed to the router.
  std::string metrics_route;

  // Headers added to the response (or the stream's head) whoever sends it: the model
  // router names the model and version that answered. Before Respond/BeginStream only.
  void AddHeader(std::string key, std::string value) {
    extra_headers_.emplace_back(std::move(key), std::move(value));
  }
  // Runs `fn` once the response was handed to the transport (after Respond, or after End
  // of a stream), on the thread that did so. Before Respond/BeginStream only.
  void OnFinish(std::function<void()> fn) { on_finish_ = std::move(fn); }

  // Returns false if a response was already sent.
  bool Respond(HttpResponse r) {
    if (responded_.exchange(true)) return false;
    SendFn send;
    {
      std::lock_guard<std::mutex> lock(mu_);
      send = std::move(send_);
      hook_ = nullptr;
    }
    for (auto& h : extra_headers_) r.headers.push_back(h);
    if (send) send(std::move(r));
    Finished();
    return true;
  }
  bool responded() const { return responded_.load(); }
  bool disconnected() const { return disconnected_.load(); }
  bool streaming() const { return streaming_.load(); }
  bool can_stream() const { return stream_ != nullptr; }

  // Streamed response: BeginStream sends the head (chunked transfer encoding), Write each
  // piece of body in order, End the end. All from one thread at a time, in that order.
  // Return false when a response was already sent / the stream is not open.
  bool BeginStream(HttpResponse head) {
    if (!stream_ || responded_.exchange(true)) return false;
    streaming_ = true;
    for (auto& h : extra_headers_) head.headers.push_back(h);
    stream_(StreamPiece{StreamPiece::Kind::kHead, std::move(head), {}});
    return true;
  }
  bool Write(std::string data) {
    if (!streaming_.load() || ended_ || disconnected_.load()) return false;
    if (!data.empty()) stream_(StreamPiece{StreamPiece::Kind::kData, {}, std::move(data)});
    return true;
  }
  void End() {
    if (!streaming_.load() || ended_) return;
    ended_ = true;
    stream_ended_ = true;
    stream_(StreamPiece{StreamPiece::Kind::kEnd, {}, {}});
    Finished();
  }

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
      if ((responded_.load() && !streaming_.load()) || stream_ended_.load() ||
          disconnected_.exchange(true)) {
        return;
      }
      hook = std::move(hook_);
    }
    if (hook) hook();
  }

 private:
  void Finished() {
    std::function<void()> fn = std::move(on_finish_);
    on_finish_ = nullptr;
    if (fn) fn();
  }

  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  std::function<void()> on_finish_;
  SendFn send_;
  std::function<void()> hook_;
  StreamFn stream_;
  std::atomic<bool> responded_{false};
  std::atomic<bool> disconnected_{false};
  std::atomic<bool> streaming_{false};
  std::atomic<bool> stream_ended_{false};
  bool ended_ = false;  // touched only by the streaming thread
};

}  // namespace sluice::server
