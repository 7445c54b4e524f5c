#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

// GCC 12 at -O2 reports a false -Wmaybe-uninitialized inside Beast's parser (boost::optional).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
#include <cerrno>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "core/log.h"

namespace sluice::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class Session;

// Live sessions, so that Stop can close them, and their counts (over max_connections or not).
struct SessionSet {
  std::mutex mu;
  std::set<std::weak_ptr<Session>, std::owner_less<std::weak_ptr<Session>>> live;
  std::atomic<int> normal{0}, overflow{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, const HttpServerOptions& options, const HttpHandler& handler,
          SessionSet* set, bool overflow)
      : stream_(std::move(socket)),
        options_(options),
        handler_(handler),
        set_(set),
        overflow_(overflow) {
    (overflow_ ? set_->overflow : set_->normal)++;
  }

  void Run() {
    {
      std::lock_guard<std::mutex> lock(set_->mu);
      key_ = weak_from_this();
      set_->live.insert(key_);
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  void Close() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.close();
    });
  }

  ~Session() {
    (overflow_ ? set_->overflow : set_->normal)--;
    std::lock_guard<std::mutex> lock(set_->mu);
    set_->live.erase(key_);
  }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(options_.max_body_bytes));
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Answers "Expect: 100-continue" (curl sends it for large bodies and would otherwise
  // wait a second), then reads the body.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *cont,
                        [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                          if (wec) return self->Shutdown();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof) {
      return Shutdown();
    }
    HttpRequest req;
    if (ec) {
      if (ec == http::error::partial_message || ec == http::error::short_read) return Shutdown();
      req.transport_error = ec == http::error::body_limit ? 413 : 400;
      req.transport_message = req.transport_error == 413
                                  ? "the request body is over the limit of " +
                                        std::to_string(options_.max_body_bytes) +
                                        " bytes (--max-body-bytes)"
                                  : "malformed HTTP request: " + ec.message();
      keep_alive_ = false;
      if (parser_->is_header_done()) {
        const auto& h = parser_->get();
        req.method = std::string(h.method_string());
        req.path = std::string(h.target());
      }
    } else {
      auto msg = parser_->release();
      keep_alive_ = msg.keep_alive();
      req.method = std::string(msg.method_string());
      req.path = std::string(msg.target());
      req.body = std::move(msg.body());
      auto auth = msg.find(http::field::authorization);
      if (auth != msg.end()) req.authorization = std::string(auth->value());
    }
    if (auto q = req.path.find('?'); q != std::string::npos) req.path.resize(q);
    if (overflow_) {
      req.overflow = true;  // one request, then the connection closes
      keep_alive_ = false;
    }
    stream_.expires_never();
    auto ex = std::make_shared<Exchange>(
        [self = shared_from_this()](HttpResponse&& r) {
          net::post(self->stream_.get_executor(),
                    [self, r = std::move(r)]() mutable { self->Write(std::move(r)); });
        },
        [self = shared_from_this()](StreamPiece&& piece) {
          net::post(self->stream_.get_executor(),
                    [self, piece = std::move(piece)]() mutable { self->Stream(std::move(piece)); });
        });
    exchange_ = ex;
    WatchDisconnect(ex);
    handler_(std::move(req), std::move(ex));
  }

  // Completes when the socket turns readable: EOF/reset means the client went away.
  void WatchDisconnect(const std::shared_ptr<Exchange>& ex) {
    std::weak_ptr<Exchange> weak = ex;
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), weak](beast::error_code ec) {
          auto e = weak.lock();
          if (!e || (e->responded() && !e->streaming()) || ec) return;
          char c;
          const ssize_t n =
              ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            e->NotifyDisconnected();
          }
          // n > 0: the client pipelined its next request; nothing to watch any more.
        });
  }

  void Write(HttpResponse&& r) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(r.status));
    res->set(http::field::server, "sluice");
    res->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) res->set(k, v);
    res->body() = std::move(r.body);
    const bool keep = keep_alive_ && !r.close;
    res->keep_alive(keep);
    res->prepare_payload();
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep](beast::error_code ec, size_t) {
                        self->exchange_.reset();
                        if (ec || !keep) return self->Shutdown();
                        self->DoRead();
                      });
  }

  // A streamed response, on the strand: the head, then each piece as one chunk
  // (chunked transfer encoding), then the last chunk; written in order from a queue.
  void Stream(StreamPiece&& piece) {
    std::string bytes;
    switch (piece.kind) {
      case StreamPiece::Kind::kHead: {
        const HttpResponse& h = piece.head;
        stream_keep_ = keep_alive_ && !h.close;
        bytes = "HTTP/1.1 " + std::to_string(h.status) + " " +
                std::string(http::obsolete_reason(static_cast<http::status>(h.status))) +
                "\r\nServer: sluice\r\nContent-Type: " + h.content_type +
                "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
        for (const auto& [k, v] : h.headers) bytes += k + ": " + v + "\r\n";
        bytes += stream_keep_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
        break;
      }
      case StreamPiece::Kind::kData: {
        char len[32];
        std::snprintf(len, sizeof len, "%zx\r\n", piece.data.size());
        bytes = len + piece.data + "\r\n";
        break;
      }
      case StreamPiece::Kind::kEnd:
        bytes = "0\r\n\r\n";
        stream_end_queued_ = true;
        break;
    }
    out_q_.push_back(std::move(bytes));
    if (out_q_.size() == 1) WriteQueued();
  }

  void WriteQueued() {
    stream_.expires_after(std::chrono::seconds(30));
    net::async_write(stream_, net::buffer(out_q_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->out_q_.pop_front();
                       if (ec) {
                         self->out_q_.clear();
                         if (auto e = self->exchange_) e->NotifyDisconnected();
                         self->exchange_.reset();
                         return self->Shutdown();
                       }
                       if (!self->out_q_.empty()) return self->WriteQueued();
                       if (!self->stream_end_queued_) return;  // more pieces to come
                       self->stream_end_queued_ = false;
                       self->exchange_.reset();
                       if (!self->stream_keep_) return self->Shutdown();
                       self->DoRead();
                     });
  }

  void Shutdown() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpServerOptions& options_;
  const HttpHandler& handler_;
  SessionSet* set_;
  const bool overflow_;
  bool keep_alive_ = true;
  std::shared_ptr<Exchange> exchange_;
  std::deque<std::string> out_q_;  // streamed response pieces not yet written
  bool stream_end_queued_ = false, stream_keep_ = true;
  std::weak_ptr<Session> key_;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  SessionSet sessions;  // before ioc: sessions left in the context unregister on its destruction
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> backoff;  // accept after running out of descriptors
  std::vector<std::thread> threads;
  int port = 0;
  int max_connections = 0;
  bool stopped = false;
  LogLimiter accept_log{1.0}, refuse_log{1.0};

  // One accept outstanding at a time: the handlers below never run concurrently.
  void Accept() {
    acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
        int64_t dropped = 0;
        if (accept_log.Allow(&dropped)) {
          SLUICE_LOG_WARN("accept failed: {} ({} connections open{})", ec.message(),
                          sessions.normal.load() + sessions.overflow.load(),
                          dropped > 0 ? ", " + std::to_string(dropped) + " more failures" : "");
        }
        const int e = ec.value();
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
          // Retrying at once would spin on the same error: wait for descriptors to free up.
          backoff->expires_after(std::chrono::milliseconds(100));
          backoff->async_wait([this](beast::error_code tec) {
            if (!tec && acceptor->is_open()) Accept();
          });
          return;
        }
        return Accept();
      }
      const bool over = sessions.normal.load() >= max_connections;
      if (over && sessions.overflow.load() >= kOverflowConnections) {
        beast::error_code ignored;
        s.close(ignored);
        int64_t dropped = 0;
        if (refuse_log.Allow(&dropped)) {
          SLUICE_LOG_WARN("connection closed: {} connections open (--max-connections {}){}",
                          sessions.normal.load() + sessions.overflow.load(), max_connections,
                          dropped > 0 ? ", " + std::to_string(dropped) + " more" : "");
        }
        return Accept();
      }
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(s), options, handler, &sessions, over)->Run();
      Accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  Impl& m = *impl_;
  beast::error_code ec;
  auto addr = net::ip::make_address(m.options.host, ec);
  if (ec) return InvalidArgument("--host: \"" + m.options.host + "\" is not an IP address");
  if (m.options.port < 0 || m.options.port > 65535) return InvalidArgument("--port out of range");
  tcp::endpoint ep(addr, static_cast<unsigned short>(m.options.port));
  m.acceptor.emplace(m.ioc);
  m.acceptor->open(ep.protocol(), ec);
  if (!ec) m.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(ep, ec);
  if (!ec) m.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kUnavailable, "cannot listen on " + m.options.host + ":" +
                                                std::to_string(m.options.port) + ": " +
                                                ec.message());
  }
  m.port = m.acceptor->local_endpoint().port();
  // Connections are capped below the descriptor limit (raised to its hard maximum first).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const int64_t fds = rl.rlim_cur == RLIM_INFINITY ? (1 << 20) : static_cast<int64_t>(rl.rlim_cur);
  const int64_t room = std::max<int64_t>(1, fds - kFdReserve - kOverflowConnections);
  if (m.options.max_connections < 0) return InvalidArgument("--max-connections must be >= 0");
  m.max_connections =
      m.options.max_connections > 0 ? m.options.max_connections : static_cast<int>(room);
  if (m.max_connections > room) {
    SLUICE_LOG_WARN(
        "--max-connections {} is over what {} file descriptors leave room for ({}): the server "
        "may run out of descriptors",
        m.max_connections, fds, room);
  }
  m.backoff.emplace(m.ioc);
  m.Accept();
  for (int i = 0; i < std::max(1, m.options.io_threads); ++i) {
    m.threads.emplace_back([&m] { m.ioc.run(); });
  }
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

int HttpServer::max_connections() const { return impl_->max_connections; }

void HttpServer::Stop() {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  if (m.acceptor) {
    net::post(m.ioc, [&m] {
      beast::error_code ec;
      m.acceptor->close(ec);
      if (m.backoff) m.backoff->cancel();
    });
  }
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(m.sessions.mu);
    for (auto& w : m.sessions.live) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->Close();
  live.clear();
  // Give the posted closes a moment to run, then stop whatever is left.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  m.ioc.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
}

}  // namespace sluice::server
