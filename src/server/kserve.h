// KServe Open Inference Protocol v2 over HTTP (docs/model-ops.md): model metadata tensors
// and POST /v2/models/{name}[/versions/{v}]/infer for scoring models.
//
//   embed:    "text" BYTES [N] or "input_ids" INT64 [N, L]     -> "embedding" FP32 [N, D]
//   classify: "text" BYTES [N] or "input_ids" INT64 [N, L]     -> "probabilities", "logits"
//                                                                  FP32 [N, C]
//   score:    "query" BYTES [1] + "documents" BYTES [N], or    -> "scores" FP32 [n],
//             "query_ids" INT64 [1, L] + "document_ids" INT64     "indices" INT64 [n]
//             [N, L]
//
// Request parameters: "truncate" (bool: over-long inputs are cut to the limit instead of
// refused) and, for score, "top_n" (int: the n best documents, best first; without it every
// document in input order). "outputs" selects outputs by name. Anything else (binary data,
// unknown inputs, parameters or datatypes) is 400 naming it. The request becomes the model's
// native request (/v1/embeddings, /classify, /v1/rerank) served by the same IO processors
// and engine; errors are {"error": "message"} as the protocol has them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/json.h"
#include "server/http_types.h"
#include "server/served_model.h"

namespace sluice::server {

// "inputs" and "outputs" of the model metadata (empty lists for models infer does not serve).
void WriteKServeTensors(const ServedModel& model, io::JsonWriter* w);

// Answers `ex` (runs on the calling thread until the model's service takes over).
void KServeInfer(ServedModel& model, const std::string& name, int64_t version, HttpRequest&& req,
                 std::shared_ptr<Exchange> ex);

// One input of an infer request read by a front end that has typed tensors (the gRPC front
// end, grpc/convert.h): its elements are texts (BYTES) or integers (INT64, INT32), or neither
// (another datatype: only counted, refused by the checks below before they are read).
struct KServeInput {
  std::string name, datatype;
  std::vector<int64_t> shape;
  size_t count = 0;                     // elements
  std::vector<std::string_view> texts;  // BYTES: views into the front end's request
  std::vector<int64_t> ids;             // INT64 / INT32
};

// An infer request with typed tensors: answered with the same checks, error messages and
// statuses as the HTTP body of the same meaning (KServeInfer), without a JSON text of it.
struct KServeRequest {
  std::string id;
  // The "parameters" object, as the HTTP body would carry it (parsed by `parameters_doc`);
  // unset when the request has none.
  std::optional<simdjson::dom::element> parameters;
  std::string parameters_json;
  std::shared_ptr<simdjson::dom::parser> parameters_doc;
  std::vector<std::string> outputs;  // requested outputs' names (empty: all)
  std::vector<KServeInput> inputs;
};

// One output tensor of an infer response: FP32 data in `fp32`, INT64 in `int64`.
struct KServeOutput {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<float> fp32;  // non-finite values as quiet NaN (JSON null)
  std::vector<int64_t> int64;
};

struct KServeResponse {
  std::string model_name, model_version, id;
  std::vector<KServeOutput> outputs;
};
// Its JSON form, the HTTP route's answer (non-finite values as null).
std::string KServeResponseJson(const KServeResponse& r);

// `request` in, `response` out: KServeInferTyped answers the exchange with 200 and an empty
// body once `response` holds the answer; any other status carries {"error": "message"}.
struct KServeCall {
  KServeRequest request;
  KServeResponse response;
};

// KServeInfer for a KServeCall (runs on the calling thread until the model's service takes
// over). `call->request`'s views must stay valid until `ex` is answered.
void KServeInferTyped(ServedModel& model, const std::string& name, int64_t version,
                      const std::string& authorization, std::shared_ptr<KServeCall> call,
                      std::shared_ptr<Exchange> ex);

// The native request KServe infer makes of a request (for tests: the HTTP body and the
// typed request give the same route and body, or the same error). `task` names the model's
// task in the error for a model infer does not serve.
struct KServeNative {
  std::string route, body;
};
StatusOr<KServeNative> KServeNativeOf(const ModelContext* context, const std::string& task,
                                      const std::string& ref, const std::string& body);
StatusOr<KServeNative> KServeNativeOf(const ModelContext* context, const std::string& task,
                                      const std::string& ref, const KServeRequest& request);

}  // namespace sluice::server
