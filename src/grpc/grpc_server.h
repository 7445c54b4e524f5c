// KServe Open Inference Protocol v2 over gRPC (src/grpc/grpc_service.proto; docs/model-ops.md,
// "KServe v2 over gRPC"): the inference RPCs and Triton's repository RPCs, on grpc++'s
// callback API. Each RPC is handed to the HTTP router as the HTTP request of the same meaning
// (grpc/convert.h; ModelInfer with its tensors typed, Router::KServeInferTyped), so routing,
// versions, limits, auth (metadata `authorization: Bearer KEY`), leases and drain, and metrics
// (route label "grpc/<Method>") are the HTTP server's. Nothing blocks a gRPC thread: the router
// answers from whichever thread finishes the work.
#pragma once

#include <memory>
#include <string>

#include "server/router.h"
#include "sluice/status.h"

namespace sluice::grpcfe {

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 8001;                      // 0 = any free port (see port())
  int64_t max_message_bytes = 8 << 20;  // --max-body-bytes: larger requests RESOURCE_EXHAUSTED
};

class GrpcServer {
 public:
  // `router` must outlive the server.
  GrpcServer(GrpcServerOptions options, server::Router* router);
  ~GrpcServer();  // Stop
  Status Start();
  int port() const;
  // Stops taking calls; calls still running get up to `grace_s` seconds, then are
  // cancelled. Idempotent.
  void Stop(double grace_s = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::grpcfe
