// KServe v2 over gRPC as the HTTP front end's requests (docs/model-ops.md, "KServe v2 over
// gRPC"): every RPC becomes the HTTP request of the same meaning (ModelInfer: POST
// /v2/models/{name}[/versions/{v}]/infer, its tensors typed: server/kserve.h KServeRequest,
// not a JSON text), answered by the router, and the HTTP answer becomes the RPC's response or
// status. Routing, versions,
// limits, validation, auth, leases (drain) and metrics are the HTTP path's; this file only
// converts. Pure functions: no server, no threads.
#pragma once

#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <string_view>

#include "grpc_service.pb.h"
#include "server/http_types.h"
#include "server/kserve.h"
#include "sluice/status.h"

namespace sluice::grpcfe {

// HTTP status -> gRPC code: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403
// PERMISSION_DENIED, 404 NOT_FOUND, 413/429 RESOURCE_EXHAUSTED, 499 CANCELLED, 501
// UNIMPLEMENTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, other 4xx FAILED_PRECONDITION,
// other 5xx INTERNAL.
grpc::StatusCode CodeOfHttp(int http_status);
// The message of an HTTP error body: {"error": "..."} (KServe) or {"error": {"message": ...}}
// (the native routes); the body itself when it is neither.
std::string ErrorMessage(std::string_view body);
// A non-200 HTTP response as a gRPC status (code and message).
grpc::Status StatusOfHttp(const server::HttpResponse& r);
grpc::Status StatusOf(const Status& s);  // a sluice Status (InvalidArgument, ...) as gRPC's

// "/v2/models/{name}[/versions/{v}]" for a ModelInfer/ModelReady/ModelMetadata request; the
// name and version are checked first (no path is built from an unchecked name).
StatusOr<std::string> ModelPath(const std::string& name, const std::string& version);

// ModelPath's checks; the version (unset: the default).
StatusOr<std::optional<int64_t>> ModelVersion(const std::string& name, const std::string& version);

// ModelInfer: the request as a typed KServe request (server/kserve.h; its texts are views
// into `req`, which must outlive *out), with every check of InferRequestJson in its order.
// *raw is set when the data came in raw_input_contents (the response then carries
// raw_output_contents). The front end's path: no JSON text of the tensors either way.
Status ReadInferRequest(const inference::ModelInferRequest& req, server::KServeRequest* out,
                        bool* raw);
// The typed response -> ModelInferResponse (raw: data in raw_output_contents); the same
// response InferResponseFromJson makes of its JSON form.
void FillInferResponse(const server::KServeResponse& r, bool raw,
                       inference::ModelInferResponse* out);

// The JSON forms of the same conversions (POST /v2/models/{name}/infer's body and answer):
// the reference the tests hold the typed path to.
StatusOr<std::string> InferRequestJson(const inference::ModelInferRequest& req, bool* raw);
Status InferResponseFromJson(std::string_view json, bool raw, inference::ModelInferResponse* out);

// GET /v2/models/{name}[/versions/{v}] -> ModelMetadataResponse.
Status MetadataFromJson(std::string_view json, inference::ModelMetadataResponse* out);
// GET /v2 -> ServerMetadataResponse.
Status ServerMetadataFromJson(std::string_view json, inference::ServerMetadataResponse* out);
// POST /v2/repository/index's list -> RepositoryIndexResponse.
Status IndexFromJson(std::string_view json, inference::RepositoryIndexResponse* out);

// The bodies of the repository calls (empty repository_name only; load: the "config"
// parameter as a string, the model.json override; unload: no parameters).
StatusOr<std::string> IndexRequestJson(const inference::RepositoryIndexRequest& req);
StatusOr<std::string> LoadRequestJson(const inference::RepositoryModelLoadRequest& req);
Status CheckUnloadRequest(const inference::RepositoryModelUnloadRequest& req);

}  // namespace sluice::grpcfe
