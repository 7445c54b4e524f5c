// gRPC <-> HTTP conversions of the KServe v2 gRPC front end (src/grpc/convert.h).
#include "grpc/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace sluice::grpcfe {
namespace {

using inference::ModelInferRequest;

ModelInferRequest ScoreRequest() {
  ModelInferRequest r;
  r.set_model_name("r");
  auto* q = r.add_inputs();
  q->set_name("query");
  q->set_datatype("BYTES");
  q->add_shape(1);
  q->mutable_contents()->add_bytes_contents("q \"x\"");
  auto* d = r.add_inputs();
  d->set_name("documents");
  d->set_datatype("BYTES");
  d->add_shape(2);
  d->mutable_contents()->add_bytes_contents("a");
  d->mutable_contents()->add_bytes_contents("b");
  return r;
}

TEST(GrpcConvert, HttpStatusToCode) {
  EXPECT_EQ(CodeOfHttp(200), grpc::StatusCode::OK);
  EXPECT_EQ(CodeOfHttp(400), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CodeOfHttp(401), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CodeOfHttp(403), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(CodeOfHttp(404), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(CodeOfHttp(413), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(CodeOfHttp(429), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(CodeOfHttp(499), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(CodeOfHttp(503), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CodeOfHttp(504), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(CodeOfHttp(409), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(CodeOfHttp(500), grpc::StatusCode::INTERNAL);
}

TEST(GrpcConvert, ErrorMessageOfBothBodyShapes) {
  EXPECT_EQ(ErrorMessage(R"({"error": "kserve says"})"), "kserve says");
  EXPECT_EQ(ErrorMessage(R"({"error": {"message": "native says", "code": 404}})"), "native says");
  EXPECT_EQ(ErrorMessage("not json"), "not json");
  server::HttpResponse r;
  r.status = 404;
  r.body = R"({"error": "gone"})";
  const grpc::Status s = StatusOfHttp(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "gone");
}

TEST(GrpcConvert, ModelPathChecksNameAndVersion) {
  EXPECT_EQ(*ModelPath("rerank", ""), "/v2/models/rerank");
  EXPECT_EQ(*ModelPath("rerank", "12"), "/v2/models/rerank/versions/12");
  EXPECT_FALSE(ModelPath("", "").ok());
  EXPECT_FALSE(ModelPath("..", "").ok());
  EXPECT_FALSE(ModelPath("a/versions/2", "").ok());
  EXPECT_FALSE(ModelPath("a", "01").ok());
  EXPECT_FALSE(ModelPath("a", "-1").ok());
}

TEST(GrpcConvert, ContentsBecomeKServeJson) {
  ModelInferRequest r = ScoreRequest();
  r.set_id("id-1");
  (*r.mutable_parameters())["top_n"].set_int64_param(1);
  (*r.mutable_parameters())["truncate"].set_bool_param(true);
  r.add_outputs()->set_name("scores");
  bool raw = true;
  auto j = InferRequestJson(r, &raw);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_FALSE(raw);
  EXPECT_EQ(*j, R"({"id":"id-1","parameters":{"top_n":1,"truncate":true},"inputs":[)"
                R"({"name":"query","datatype":"BYTES","shape":[1],"data":["q \"x\""]},)"
                R"({"name":"documents","datatype":"BYTES","shape":[2],"data":["a","b"]}],)"
                R"("outputs":[{"name":"scores"}]})");
}

TEST(GrpcConvert, RawContentsDecoded) {
  ModelInferRequest r;
  r.set_model_name("x");
  auto* q = r.add_inputs();
  q->set_name("query");
  q->set_datatype("BYTES");
  q->add_shape(2);
  std::string b;
  for (std::string s : {"ab", ""}) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    b.append(reinterpret_cast<const char*>(&n), 4);
    b += s;
  }
  r.add_raw_input_contents(b);
  auto* ids = r.add_inputs();
  ids->set_name("document_ids");
  ids->set_datatype("INT64");
  ids->add_shape(1);
  ids->add_shape(2);
  const int64_t v[2] = {7, -3};
  r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(v), sizeof(v)));
  bool raw = false;
  auto j = InferRequestJson(r, &raw);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_TRUE(raw);
  EXPECT_NE(j->find(R"("data":["ab",""])"), std::string::npos) << *j;
  EXPECT_NE(j->find(R"("data":[7,-3])"), std::string::npos) << *j;
  // Cut short, not a multiple of the width, one entry for two inputs.
  r.set_raw_input_contents(0, b.substr(0, b.size() - 5));
  EXPECT_FALSE(InferRequestJson(r, &raw).ok());
  r.set_raw_input_contents(0, b);
  r.set_raw_input_contents(1, std::string(reinterpret_cast<const char*>(v), 12));
  auto e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("not a multiple of 8"), std::string::npos);
  r.mutable_raw_input_contents()->RemoveLast();
  e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("one entry per input"), std::string::npos);
}

TEST(GrpcConvert, RequestErrorsNameTheField) {
  ModelInferRequest r = ScoreRequest();
  r.mutable_inputs(1)->mutable_contents()->add_fp32_contents(1.f);
  bool raw = false;
  auto e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("inputs[1].contents"), std::string::npos);
  EXPECT_NE(e.status().message().find("fp32_contents is set"), std::string::npos);

  r = ScoreRequest();
  r.mutable_inputs(0)->mutable_contents()->set_bytes_contents(0, "\xff\xfe");
  e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("UTF-8"), std::string::npos);

  r = ScoreRequest();
  (*r.mutable_parameters())["x"];  // no value set
  e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("parameters.x"), std::string::npos);

  r = ScoreRequest();
  (*r.mutable_inputs(0)->mutable_parameters())["binary_data_size"].set_int64_param(1);
  EXPECT_FALSE(InferRequestJson(r, &raw).ok());

  r = ScoreRequest();
  r.mutable_inputs(0)->set_datatype("FP16");
  e = InferRequestJson(r, &raw);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("FP16"), std::string::npos);
}

TEST(GrpcConvert, ResponseContentsOrRaw) {
  const char* json = R"({"model_name":"r","model_version":"2","id":"q","outputs":[)"
                     R"({"name":"scores","datatype":"FP32","shape":[2],"data":[0.5,null]},)"
                     R"({"name":"indices","datatype":"INT64","shape":[2],"data":[1,0]}]})";
  inference::ModelInferResponse a;
  ASSERT_TRUE(InferResponseFromJson(json, false, &a).ok());
  EXPECT_EQ(a.model_name(), "r");
  EXPECT_EQ(a.model_version(), "2");
  EXPECT_EQ(a.id(), "q");
  ASSERT_EQ(a.outputs_size(), 2);
  EXPECT_EQ(a.outputs(0).contents().fp32_contents(0), 0.5f);
  EXPECT_TRUE(std::isnan(a.outputs(0).contents().fp32_contents(1)));
  EXPECT_EQ(a.outputs(1).contents().int64_contents(0), 1);
  EXPECT_EQ(a.raw_output_contents_size(), 0);
  inference::ModelInferResponse b;
  ASSERT_TRUE(InferResponseFromJson(json, true, &b).ok());
  ASSERT_EQ(b.raw_output_contents_size(), 2);
  EXPECT_EQ(b.outputs(0).contents().fp32_contents_size(), 0);
  float f;
  std::memcpy(&f, b.raw_output_contents(0).data(), 4);
  EXPECT_EQ(f, 0.5f);
  int64_t i;
  std::memcpy(&i, b.raw_output_contents(1).data(), 8);
  EXPECT_EQ(i, 1);
  EXPECT_EQ(b.outputs(1).shape(0), 2);
}

TEST(GrpcConvert, RepositoryRequests) {
  inference::RepositoryModelLoadRequest l;
  l.set_model_name("m");
  EXPECT_EQ(*LoadRequestJson(l), "{}");
  (*l.mutable_parameters())["config"].set_string_param(R"({"task":"score"})");
  EXPECT_EQ(*LoadRequestJson(l), R"({"parameters":{"config":"{\"task\":\"score\"}"}})");
  (*l.mutable_parameters())["config"].set_bytes_param("{}");
  EXPECT_FALSE(LoadRequestJson(l).ok());
  l.mutable_parameters()->clear();
  (*l.mutable_parameters())["file:1/x"].set_bytes_param("x");
  EXPECT_FALSE(LoadRequestJson(l).ok());
  l.mutable_parameters()->clear();
  l.set_repository_name("other");
  EXPECT_FALSE(LoadRequestJson(l).ok());

  inference::RepositoryIndexRequest ir;
  EXPECT_EQ(*IndexRequestJson(ir), "{}");
  ir.set_ready(true);
  EXPECT_EQ(*IndexRequestJson(ir), R"({"ready":true})");
  inference::RepositoryIndexResponse idx;
  ASSERT_TRUE(
      IndexFromJson(R"([{"name":"a","version":"1","state":"READY"},{"name":"b"}])", &idx).ok());
  ASSERT_EQ(idx.models_size(), 2);
  EXPECT_EQ(idx.models(0).state(), "READY");
  EXPECT_EQ(idx.models(1).version(), "");

  inference::RepositoryModelUnloadRequest u;
  u.set_model_name("m");
  EXPECT_TRUE(CheckUnloadRequest(u).ok());
  (*u.mutable_parameters())["unload_dependents"].set_bool_param(true);
  EXPECT_FALSE(CheckUnloadRequest(u).ok());
}

TEST(GrpcConvert, Metadata) {
  inference::ModelMetadataResponse m;
  ASSERT_TRUE(MetadataFromJson(
                  R"({"name":"e","versions":["1","2"],"platform":"sluice","default_version":"2",)"
                  R"("inputs":[{"name":"text","datatype":"BYTES","shape":[-1]}],)"
                  R"("outputs":[{"name":"embedding","datatype":"FP32","shape":[-1,8]}]})",
                  &m)
                  .ok());
  EXPECT_EQ(m.versions_size(), 2);
  EXPECT_EQ(m.outputs(0).shape(1), 8);
  inference::ServerMetadataResponse s;
  ASSERT_TRUE(
      ServerMetadataFromJson(R"({"name":"sluice","version":"0.1.0","extensions":["x"]})", &s).ok());
  EXPECT_EQ(s.extensions(0), "x");
}

}  // namespace
}  // namespace sluice::grpcfe
