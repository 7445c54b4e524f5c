// gRPC <-> HTTP conversions of the KServe v2 gRPC front end (src/grpc/convert.h).
#include "grpc/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

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

// The typed path (ReadInferRequest -> KServeNativeOf(KServeRequest)) against the JSON path
// it replaced (InferRequestJson -> the HTTP route's KServeNativeOf(body)): the same native
// request, or the same error (code and message), for each request.
struct Outcome {
  bool ok = false;
  StatusCode code = StatusCode::kOk;
  std::string message, route, body;
  bool raw = false;
};

Outcome ViaJson(const ModelInferRequest& r, const ModelContext* ctx, const std::string& task) {
  Outcome o;
  auto j = InferRequestJson(r, &o.raw);
  StatusOr<server::KServeNative> n = j.ok() ? server::KServeNativeOf(ctx, task, "m:1", *j)
                                            : StatusOr<server::KServeNative>(j.status());
  o.ok = n.ok();
  if (n.ok()) {
    o.route = n->route;
    o.body = n->body;
  } else {
    o.code = n.status().code();
    o.message = n.status().message();
  }
  return o;
}

Outcome Typed(const ModelInferRequest& r, const ModelContext* ctx, const std::string& task) {
  Outcome o;
  server::KServeRequest k;
  Status s = ReadInferRequest(r, &k, &o.raw);
  StatusOr<server::KServeNative> n =
      s.ok() ? server::KServeNativeOf(ctx, task, "m:1", k) : StatusOr<server::KServeNative>(s);
  o.ok = n.ok();
  if (n.ok()) {
    o.route = n->route;
    o.body = n->body;
  } else {
    o.code = n.status().code();
    o.message = n.status().message();
  }
  return o;
}

ModelContext Context(const std::string& task) {
  ModelContext c;
  c.task = task;
  c.output_dim = 4;
  return c;
}

void ExpectSame(const ModelInferRequest& r, const std::string& what, bool want_ok) {
  for (const char* task : {"score", "embed", "classify", "generate"}) {
    const ModelContext c = Context(task);
    const ModelContext* ctx = std::string(task) == "generate" ? nullptr : &c;
    const Outcome a = ViaJson(r, ctx, task);
    const Outcome b = Typed(r, ctx, task);
    SCOPED_TRACE(what + " on a " + task + " model");
    EXPECT_EQ(a.ok, b.ok) << a.message << " | " << b.message;
    EXPECT_EQ(a.code, b.code);
    EXPECT_EQ(a.message, b.message);
    EXPECT_EQ(a.route, b.route);
    EXPECT_EQ(a.body, b.body);
    EXPECT_EQ(a.raw, b.raw);
    if (std::string(task) == "score") {
      EXPECT_EQ(b.ok, want_ok) << b.message;
    }
  }
}

void AddIds(ModelInferRequest* r, const char* name, const std::string& datatype,
            std::vector<int64_t> shape, std::vector<int64_t> ids) {
  auto* t = r->add_inputs();
  t->set_name(name);
  t->set_datatype(datatype);
  for (int64_t d : shape) t->add_shape(d);
  for (int64_t v : ids) {
    if (datatype == "INT64") {
      t->mutable_contents()->add_int64_contents(v);
    } else if (datatype == "UINT64") {
      t->mutable_contents()->add_uint64_contents(static_cast<uint64_t>(v));
    } else if (datatype == "UINT8" || datatype == "UINT32") {
      t->mutable_contents()->add_uint_contents(static_cast<uint32_t>(v));
    } else if (datatype == "FP32") {
      t->mutable_contents()->add_fp32_contents(static_cast<float>(v));
    } else if (datatype == "BOOL") {
      t->mutable_contents()->add_bool_contents(v != 0);
    } else {
      t->mutable_contents()->add_int_contents(static_cast<int32_t>(v));
    }
  }
}

ModelInferRequest IdsRequest() {
  ModelInferRequest r;
  r.set_model_name("m");
  AddIds(&r, "document_ids", "INT64", {2, 3}, {5, 6, 7, 8, 9, 10});
  AddIds(&r, "query_ids", "INT64", {1, 2}, {11, 12});
  return r;
}

std::string RawOf(const std::vector<std::string>& texts) {
  std::string b;
  for (const std::string& s : texts) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    b.append(reinterpret_cast<const char*>(&n), 4);
    b += s;
  }
  return b;
}

TEST(GrpcConvert, TypedInferMatchesTheJsonPath) {
  ExpectSame(ScoreRequest(), "texts", true);
  ExpectSame(IdsRequest(), "ids", true);
  {
    ModelInferRequest r;
    AddIds(&r, "document_ids", "INT32", {2, 1}, {5, 6});
    AddIds(&r, "query_ids", "INT32", {2}, {11, 12});
    ExpectSame(r, "INT32 ids, a [L] query", true);
  }
  {
    ModelInferRequest r = ScoreRequest();
    r.set_id("req-7");
    (*r.mutable_parameters())["top_n"].set_int64_param(1);
    (*r.mutable_parameters())["truncate"].set_bool_param(true);
    r.add_outputs()->set_name("scores");
    ExpectSame(r, "id, parameters, outputs", true);
  }
  {
    ModelInferRequest r;  // text inputs of an embedding/classification model
    auto* t = r.add_inputs();
    t->set_name("text");
    t->set_datatype("BYTES");
    t->add_shape(2);
    t->add_shape(1);
    t->mutable_contents()->add_bytes_contents("one");
    t->mutable_contents()->add_bytes_contents("two");
    r.add_outputs()->set_name("logits");
    ExpectSame(r, "text [2, 1]", false);
    r.mutable_outputs(0)->set_name("embedding");
    ExpectSame(r, "text, embedding output", false);
  }
  {
    ModelInferRequest r;
    AddIds(&r, "input_ids", "INT64", {1, 3}, {1, 2, 3});
    ExpectSame(r, "input_ids", false);
  }
}

TEST(GrpcConvert, TypedInferRawMatchesTheJsonPath) {
  ModelInferRequest r;
  auto* q = r.add_inputs();
  q->set_name("query");
  q->set_datatype("BYTES");
  q->add_shape(1);
  r.add_raw_input_contents(RawOf({"q \"x\""}));
  auto* d = r.add_inputs();
  d->set_name("documents");
  d->set_datatype("BYTES");
  d->add_shape(2);
  r.add_raw_input_contents(RawOf({"a", ""}));
  ExpectSame(r, "raw BYTES", true);
  r.set_raw_input_contents(1, RawOf({"a", "b", "c"}));
  ExpectSame(r, "raw BYTES, 3 elements for shape [2]", false);
  r.set_raw_input_contents(1, RawOf({"a", "b"}).substr(0, 9));
  ExpectSame(r, "raw BYTES cut short", false);
  r.set_raw_input_contents(1, RawOf({"a", "\xff"}));
  ExpectSame(r, "raw BYTES not UTF-8", false);

  ModelInferRequest ids;
  for (const char* type : {"INT64", "INT32"}) {
    ids.Clear();
    const size_t w = std::string(type) == "INT64" ? 8 : 4;
    auto raw = [&](std::vector<int64_t> v) {
      std::string b;
      for (int64_t x : v) {
        const int32_t x32 = static_cast<int32_t>(x);
        b.append(w == 8 ? reinterpret_cast<const char*>(&x) : reinterpret_cast<const char*>(&x32),
                 w);
      }
      return b;
    };
    auto* di = ids.add_inputs();
    di->set_name("document_ids");
    di->set_datatype(type);
    di->add_shape(2);
    di->add_shape(2);
    ids.add_raw_input_contents(raw({1, -2, 3, 4}));
    auto* qi = ids.add_inputs();
    qi->set_name("query_ids");
    qi->set_datatype(type);
    qi->add_shape(1);
    qi->add_shape(1);
    ids.add_raw_input_contents(raw({9}));
    ExpectSame(ids, std::string("raw ") + type, true);
    ids.set_raw_input_contents(0, raw({1, 2, 3}));
    ExpectSame(ids, std::string("raw ") + type + ", shape mismatch", false);
    ids.set_raw_input_contents(0, raw({1, 2, 3, 4}).substr(1));
    ExpectSame(ids, std::string("raw ") + type + ", not a multiple of the width", false);
  }
  ids.mutable_inputs(0)->set_datatype("FP32");
  ids.set_raw_input_contents(0, std::string(16, '\0'));
  ExpectSame(ids, "raw FP32 ids", false);
  ids.mutable_inputs(0)->set_datatype("UINT8");
  ExpectSame(ids, "raw UINT8", false);
  ids.mutable_inputs(0)->set_datatype("INT64");
  ids.mutable_inputs(0)->mutable_contents()->add_int64_contents(1);
  ExpectSame(ids, "raw and contents", false);
  ids.mutable_raw_input_contents()->RemoveLast();
  ExpectSame(ids, "one raw entry for two inputs", false);
}

TEST(GrpcConvert, TypedInferErrorsMatchTheJsonPath) {
  auto with = [](auto edit) {
    ModelInferRequest r = IdsRequest();
    edit(&r);
    return r;
  };
  // Wrong datatypes.
  for (const char* type : {"BYTES", "FP32", "UINT8", "UINT64", "INT8", "BOOL", "FP16", ""}) {
    ModelInferRequest r;
    if (std::string(type) == "BYTES") {
      auto* t = r.add_inputs();
      t->set_name("document_ids");
      t->set_datatype("BYTES");
      t->add_shape(1);
      t->add_shape(1);
      t->mutable_contents()->add_bytes_contents("7");
    } else if (std::string(type) == "FP16" || std::string(type).empty()) {
      auto* t = r.add_inputs();
      t->set_name("document_ids");
      t->set_datatype(type);
      t->add_shape(0);
    } else {
      AddIds(&r, "document_ids", type, {1, 2}, {5, 6});
    }
    AddIds(&r, "query_ids", "INT64", {1, 1}, {3});
    ExpectSame(r, std::string("document_ids of datatype ") + type, false);
  }
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
             }),
             "two contents fields", false);
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("BYTES"); }),
             "BYTES datatype, int64 contents", false);
  {
    ModelInferRequest r = ScoreRequest();
    r.mutable_inputs(1)->set_datatype("INT64");
    r.mutable_inputs(1)->mutable_contents()->clear_bytes_contents();
    r.mutable_inputs(1)->mutable_contents()->add_int64_contents(1);
    r.mutable_inputs(1)->mutable_contents()->add_int64_contents(2);
    ExpectSame(r, "documents of INT64", false);
    r = ScoreRequest();
    r.mutable_inputs(0)->set_datatype("INT64");
    r.mutable_inputs(0)->mutable_contents()->clear_bytes_contents();
    r.mutable_inputs(0)->mutable_contents()->add_int64_contents(1);
    ExpectSame(r, "query of INT64", false);
    r = ScoreRequest();
    r.mutable_inputs(0)->mutable_contents()->add_bytes_contents("second");
    r.mutable_inputs(0)->set_shape(0, 2);
    ExpectSame(r, "two queries", false);
    r = ScoreRequest();
    r.mutable_inputs(1)->add_shape(1);
    r.mutable_inputs(1)->set_shape(0, 1);
    r.mutable_inputs(1)->set_shape(1, 2);
    ExpectSame(r, "documents [1, 2]", false);
    r = ScoreRequest();
    r.mutable_inputs(1)->mutable_contents()->set_bytes_contents(1, "\xc3\x28");
    ExpectSame(r, "documents not UTF-8", false);
    r = ScoreRequest();
    r.mutable_inputs(0)->set_name("\xff");
    ExpectSame(r, "input name not UTF-8", false);
    r = ScoreRequest();
    r.set_id("\xff");
    ExpectSame(r, "id not UTF-8", false);
  }
  // Shapes.
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(0)->set_shape(1, 4); }),
             "shape wants more", false);
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(0)->clear_shape(); }), "no shape",
             false);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->set_shape(0, -2);
               r->mutable_inputs(0)->set_shape(1, -3);
             }),
             "negative dimensions", false);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->clear_shape();
               r->mutable_inputs(0)->add_shape(6);
             }),
             "document_ids [6]", false);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(1)->set_shape(0, 2);
               r->mutable_inputs(1)->set_shape(1, 1);
             }),
             "query_ids of two rows", false);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->set_shape(0, 0);
               r->mutable_inputs(0)->mutable_contents()->clear_int64_contents();
             }),
             "no documents", true);
  // Missing, unknown, doubled inputs.
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs()->RemoveLast(); }), "no query",
             false);
  ExpectSame(with([](ModelInferRequest* r) { r->clear_inputs(); }), "no inputs", false);
  ExpectSame(with([](ModelInferRequest* r) {
               AddIds(r, "query", "INT64", {1, 1}, {1});
               r->mutable_inputs(2)->set_datatype("BYTES");
               r->mutable_inputs(2)->mutable_contents()->clear_int64_contents();
               r->mutable_inputs(2)->mutable_contents()->add_bytes_contents("q");
             }),
             "query and query_ids", false);
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(0)->set_name("docs"); }),
             "unknown input", false);
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(0)->set_name(""); }),
             "input without a name", false);
  ExpectSame(with([](ModelInferRequest* r) { r->mutable_inputs(1)->set_name("document_ids"); }),
             "document_ids twice", false);
  ExpectSame(with([](ModelInferRequest* r) {
               (*r->mutable_inputs(0)->mutable_parameters())["binary_data_size"].set_int64_param(4);
             }),
             "per-input parameters", false);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->mutable_contents()->set_int64_contents(0, -1);
             }),
             "negative id (the native route refuses it)", true);
  ExpectSame(with([](ModelInferRequest* r) {
               r->mutable_inputs(0)->set_datatype("UINT64");
               r->mutable_inputs(0)->mutable_contents()->clear_int64_contents();
               for (int i = 0; i < 6; ++i) {
                 r->mutable_inputs(0)->mutable_contents()->add_uint64_contents(~uint64_t{0});
               }
             }),
             "uint64 too large", false);
  // Parameters and outputs.
  auto param = [&](const char* key, auto set) {
    return with([&](ModelInferRequest* r) { set(&(*r->mutable_parameters())[key]); });
  };
  using P = inference::InferParameter;
  ExpectSame(param("top_n", [](P* p) { p->set_int64_param(0); }), "top_n 0", false);
  ExpectSame(param("top_n", [](P* p) { p->set_int64_param(1); }), "top_n 1", true);
  ExpectSame(param("top_n", [](P* p) { p->set_double_param(2.0); }), "top_n 2.0", true);
  ExpectSame(param("top_n", [](P* p) { p->set_double_param(2.5); }), "top_n 2.5", false);
  ExpectSame(param("top_n", [](P* p) { p->set_double_param(1e300); }), "top_n 1e300", false);
  // NaN is JSON null: as if top_n were not given.
  ExpectSame(param("top_n", [](P* p) { p->set_double_param(std::nan("")); }), "top_n NaN", true);
  ExpectSame(param("top_n", [](P* p) { p->set_string_param("2"); }), "top_n a string", false);
  ExpectSame(param("top_n", [](P* p) { p->set_uint64_param(3); }), "top_n uint64", true);
  ExpectSame(param("top_n", [](P* p) { p->set_uint64_param(~uint64_t{0}); }), "top_n too large",
             false);
  ExpectSame(param("truncate", [](P* p) { p->set_bool_param(true); }), "truncate", true);
  ExpectSame(param("truncate", [](P* p) { p->set_int64_param(1); }), "truncate 1", false);
  ExpectSame(param("temperature", [](P* p) { p->set_double_param(1); }), "unknown parameter",
             false);
  ExpectSame(param("x", [](P*) {}), "parameter without a value", false);
  ExpectSame(param("\xff", [](P* p) { p->set_bool_param(true); }), "parameter key not UTF-8",
             false);
  ExpectSame(with([](ModelInferRequest* r) { r->add_outputs()->set_name("indices"); }),
             "indices only", true);
  ExpectSame(with([](ModelInferRequest* r) { r->add_outputs()->set_name("embedding"); }),
             "an output the model lacks", false);
  ExpectSame(with([](ModelInferRequest* r) {
               auto* o = r->add_outputs();
               o->set_name("scores");
               (*o->mutable_parameters())["binary_data"].set_bool_param(true);
             }),
             "output parameters", false);
}

TEST(GrpcConvert, TypedResponseMatchesTheJsonPath) {
  server::KServeResponse r;
  r.model_name = "m";
  r.model_version = "3";
  r.id = "q1";
  r.outputs.push_back(
      server::KServeOutput{"scores",
                           "FP32",
                           {4},
                           {0.5f, -1.25e-7f, std::numeric_limits<float>::infinity(), std::nanf("")},
                           {}});
  r.outputs.push_back(server::KServeOutput{"indices", "INT64", {4}, {}, {3, 0, -1, 1LL << 40}});
  r.outputs.push_back(server::KServeOutput{"empty", "FP32", {0}, {}, {}});
  r.outputs.push_back(server::KServeOutput{"none", "INT64", {0}, {}, {}});
  for (bool raw : {false, true}) {
    inference::ModelInferResponse a, b;
    ASSERT_TRUE(InferResponseFromJson(server::KServeResponseJson(r), raw, &a).ok());
    FillInferResponse(r, raw, &b);
    // NaN != NaN: compare the bytes of the serialised messages.
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << "raw " << raw;
    EXPECT_EQ(b.raw_output_contents_size(), raw ? 4 : 0);
  }
  r.id.clear();
  inference::ModelInferResponse a, b;
  ASSERT_TRUE(InferResponseFromJson(server::KServeResponseJson(r), false, &a).ok());
  FillInferResponse(r, false, &b);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
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
