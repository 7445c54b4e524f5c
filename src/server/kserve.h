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
#include <string>

#include "io/json.h"
#include "server/http_types.h"
#include "server/served_model.h"

namespace sluice::server {

// "inputs" and "outputs" of the model metadata (empty lists for models infer does not serve).
void WriteKServeTensors(const ServedModel& model, io::JsonWriter* w);

// Answers `ex` (runs on the calling thread until the model's service takes over).
void KServeInfer(ServedModel& model, const std::string& name, int64_t version, HttpRequest&& req,
                 std::shared_ptr<Exchange> ex);

}  // namespace sluice::server
