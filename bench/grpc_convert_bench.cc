// Per-RPC cost of the gRPC front end's ModelInfer conversions (src/grpc/convert.h), on the
// request of `sluice bench --grpc-model` (bench/modelops_bench.py: 8 documents x 24 token
// ids + an 8-token query, INT64 contents): the typed path (ReadInferRequest -> the native
// body; the response's tensors -> FillInferResponse) against the KServe JSON text round trip
// it replaced (InferRequestJson -> the HTTP route's reading of it; KServeResponseJson ->
// InferResponseFromJson). The model's own work is the same on both and not run.
// Usage: grpc_convert_bench [--iters N] [--documents D] [--doc-tokens L]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "grpc/convert.h"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b, int n) {
  return std::chrono::duration<double, std::micro>(b - a).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000, docs = 8, len = 24, qlen = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--documents")) docs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--doc-tokens")) len = std::atoi(argv[i + 1]);
  }
  using namespace sluice;
  inference::ModelInferRequest req;
  req.set_model_name("rr");
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(5, 399);
  auto* di = req.add_inputs();
  di->set_name("document_ids");
  di->set_datatype("INT64");
  di->add_shape(docs);
  di->add_shape(len);
  for (int i = 0; i < docs * len; ++i) di->mutable_contents()->add_int64_contents(d(rng));
  auto* qi = req.add_inputs();
  qi->set_name("query_ids");
  qi->set_datatype("INT64");
  qi->add_shape(1);
  qi->add_shape(qlen);
  for (int i = 0; i < qlen; ++i) qi->mutable_contents()->add_int64_contents(d(rng));
  ModelContext ctx;
  ctx.task = "score";
  server::KServeResponse resp;
  resp.model_name = "rr";
  resp.model_version = "2";
  resp.outputs.push_back(server::KServeOutput{"scores", "FP32", {docs}, {}, {}});
  resp.outputs.push_back(server::KServeOutput{"indices", "INT64", {docs}, {}, {}});
  for (int i = 0; i < docs; ++i) {
    resp.outputs[0].fp32.push_back(0.001f * static_cast<float>(d(rng)));
    resp.outputs[1].int64.push_back(i);
  }
  size_t sink = 0;
  for (int round = 0; round < 2; ++round) {  // the first round warms up
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      bool raw = false;
      auto json = grpcfe::InferRequestJson(req, &raw);
      auto native = server::KServeNativeOf(&ctx, "score", "rr:2", *json);
      inference::ModelInferResponse out;
      (void)grpcfe::InferResponseFromJson(server::KServeResponseJson(resp), raw, &out);
      sink += native->body.size() + static_cast<size_t>(out.outputs_size());
    }
    const auto t1 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      bool raw = false;
      server::KServeRequest k;
      (void)grpcfe::ReadInferRequest(req, &k, &raw);
      auto native = server::KServeNativeOf(&ctx, "score", "rr:2", k);
      inference::ModelInferResponse out;
      grpcfe::FillInferResponse(resp, raw, &out);
      sink += native->body.size() + static_cast<size_t>(out.outputs_size());
    }
    const auto t2 = Clock::now();
    if (round == 1) {
      std::printf(
          "ModelInfer conversions, %d documents x %d ids + %d query ids, %d iterations:\n"
          "  KServe JSON round trip: %.2f us per RPC\n  typed:                  %.2f us per "
          "RPC\n",
          docs, len, qlen, iters, Us(t0, t1, iters), Us(t1, t2, iters));
    }
  }
  return sink == 0;
}
