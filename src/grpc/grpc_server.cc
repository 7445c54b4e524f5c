#include "grpc/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>

#include "core/log.h"
#include "grpc/convert.h"
#include "grpc_service.grpc.pb.h"
#include "server/errors.h"
#include "serving/repository.h"

namespace sluice::grpcfe {
namespace {

using server::Exchange;
using server::HttpRequest;
using server::HttpResponse;

// One unary call: finished once (from whichever thread answers), told when the client goes
// away first (cancellation, deadline), deleted by grpc++ when done.
class Reactor final : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override {
    std::shared_ptr<Exchange> ex;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ex = ex_.lock();
    }
    if (ex) ex->NotifyDisconnected();
  }
  void OnDone() override { delete this; }
  void Watch(const std::shared_ptr<Exchange>& ex) {
    std::lock_guard<std::mutex> lock(mu_);
    ex_ = ex;
  }

 private:
  std::mutex mu_;
  std::weak_ptr<Exchange> ex_;
};

std::string Authorization(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class Service final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit Service(server::Router* router) : router_(router) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* resp) override {
    return Call(ctx, "ServerLive", "GET", "/v2/health/live", "", [resp](const HttpResponse& r) {
      resp->set_live(r.status == 200);
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* resp) override {
    // 503 (loading, draining) is an answer here: ready = false.
    return Call(ctx, "ServerReady", "GET", "/v2/health/ready", "", [resp](const HttpResponse& r) {
      if (r.status != 200 && r.status != 503) return StatusOfHttp(r);
      resp->set_ready(r.status == 200);
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override {
    auto path = ModelPath(req->name(), req->version());
    if (!path.ok()) return Refuse(ctx, "ModelReady", path.status());
    // Not served (404) or draining (503): ready = false, as the protocol's boolean says.
    return Call(ctx, "ModelReady", "GET", *path + "/ready", "", [resp](const HttpResponse& r) {
      if (r.status != 200 && r.status != 404 && r.status != 503) return StatusOfHttp(r);
      resp->set_ready(r.status == 200);
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* resp) override {
    return Call(ctx, "ServerMetadata", "GET", "/v2", "", [resp](const HttpResponse& r) {
      if (r.status != 200) return StatusOfHttp(r);
      return StatusOf(ServerMetadataFromJson(r.body, resp));
    });
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override {
    auto path = ModelPath(req->name(), req->version());
    if (!path.ok()) return Refuse(ctx, "ModelMetadata", path.status());
    return Call(ctx, "ModelMetadata", "GET", *path, "", [resp](const HttpResponse& r) {
      if (r.status != 200) return StatusOfHttp(r);
      return StatusOf(MetadataFromJson(r.body, resp));
    });
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) override {
    auto version = ModelVersion(req->model_name(), req->model_version());
    if (!version.ok()) {
      Status s = version.status();
      if (req->model_name().empty()) s = InvalidArgument("model_name: is required");
      return Refuse(ctx, "ModelInfer", s);
    }
    // The tensors go to the infer route typed (no JSON text of them); its checks, errors
    // and statuses are the HTTP route's (server/kserve.h KServeInferTyped).
    auto call = std::make_shared<server::KServeCall>();
    bool raw = false;
    if (Status s = ReadInferRequest(*req, &call->request, &raw); !s.ok()) {
      return Refuse(ctx, "ModelInfer", s);
    }
    auto* reactor = new Reactor();
    auto ex = std::make_shared<Exchange>([reactor, resp, raw, call](HttpResponse&& r) {
      if (r.status != 200) {
        reactor->Finish(StatusOfHttp(r));
        return;
      }
      FillInferResponse(call->response, raw, resp);
      reactor->Finish(grpc::Status::OK);
    });
    ex->metrics_route = "grpc/ModelInfer";
    reactor->Watch(ex);
    router_->KServeInferTyped(req->model_name(), *version, Authorization(ctx), std::move(call),
                              std::move(ex));
    return reactor;
  }

  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) override {
    auto body = IndexRequestJson(*req);
    if (!body.ok()) return Refuse(ctx, "RepositoryIndex", body.status());
    return Call(ctx, "RepositoryIndex", "POST", "/v2/repository/index", std::move(body).value(),
                [resp](const HttpResponse& r) {
                  if (r.status != 200) return StatusOfHttp(r);
                  return StatusOf(IndexFromJson(r.body, resp));
                });
  }

  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse*) override {
    auto path = RepositoryPath(req->model_name(), "load");
    if (!path.ok()) return Refuse(ctx, "RepositoryModelLoad", path.status());
    auto body = LoadRequestJson(*req);
    if (!body.ok()) return Refuse(ctx, "RepositoryModelLoad", body.status());
    return Call(
        ctx, "RepositoryModelLoad", "POST", *path, std::move(body).value(),
        [](const HttpResponse& r) { return r.status == 200 ? grpc::Status::OK : StatusOfHttp(r); });
  }

  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* req,
      inference::RepositoryModelUnloadResponse*) override {
    auto path = RepositoryPath(req->model_name(), "unload");
    if (!path.ok()) return Refuse(ctx, "RepositoryModelUnload", path.status());
    if (Status s = CheckUnloadRequest(*req); !s.ok()) {
      return Refuse(ctx, "RepositoryModelUnload", s);
    }
    return Call(ctx, "RepositoryModelUnload", "POST", *path, "", [](const HttpResponse& r) {
      return r.status == 200 ? grpc::Status::OK : StatusOfHttp(r);
    });
  }

 private:
  static StatusOr<std::string> RepositoryPath(const std::string& name, const char* action) {
    if (name.empty()) return InvalidArgument("model_name: is required");
    RETURN_IF_ERROR(serving::ValidateName(name));
    return "/v2/repository/models/" + name + "/" + action;
  }

  // A request refused before it reaches the router: counted under the method's route with
  // the HTTP status its error maps to, as the router counts its own refusals.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, const char* method,
                                   const Status& s) {
    auto* reactor = ctx->DefaultReactor();
    router_->RecordResponse(std::string("grpc/") + method, server::StatusResponse(s).status, 0);
    reactor->Finish(StatusOf(s));
    return reactor;
  }

  // Hands the call to the router as an HTTP request; `done` fills the response from the
  // HTTP answer and says the call's status.
  template <typename Done>
  grpc::ServerUnaryReactor* Call(grpc::CallbackServerContext* ctx, const char* method,
                                 const char* http_method, std::string path, std::string body,
                                 Done done) {
    auto* reactor = new Reactor();
    auto ex =
        std::make_shared<Exchange>([reactor, done](HttpResponse&& r) { reactor->Finish(done(r)); });
    ex->metrics_route = std::string("grpc/") + method;
    reactor->Watch(ex);
    HttpRequest req;
    req.method = http_method;
    req.path = std::move(path);
    req.body = std::move(body);
    req.authorization = Authorization(ctx);
    router_->Handle(std::move(req), std::move(ex));
    return reactor;
  }

  server::Router* router_;
};

}  // namespace

struct GrpcServer::Impl {
  GrpcServerOptions options;
  server::Router* router;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::mutex mu;
  bool stopped = false;
};

GrpcServer::GrpcServer(GrpcServerOptions options, server::Router* router)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->router = router;
}

GrpcServer::~GrpcServer() { Stop(0); }

Status GrpcServer::Start() {
  impl_->service = std::make_unique<Service>(impl_->router);
  grpc::ServerBuilder b;
  const std::string addr = impl_->options.host + ":" + std::to_string(impl_->options.port);
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &impl_->port);
  const int64_t max = impl_->options.max_message_bytes;
  b.SetMaxReceiveMessageSize(max > INT32_MAX ? INT32_MAX : static_cast<int>(max));
  b.RegisterService(impl_->service.get());
  impl_->server = b.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    impl_->server.reset();
    return Status(StatusCode::kUnavailable, "gRPC: cannot listen on " + addr);
  }
  return Status::Ok();
}

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::Stop(double grace_s) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopped || !impl_->server) return;
  impl_->stopped = true;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  impl_->server->Wait();
}

}  // namespace sluice::grpcfe
