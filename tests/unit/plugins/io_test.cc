// IO-processor plugins (include/sluice/plugin.h minors 1 and 2, io/plugin_io.h): the loader (the
// keyword_rerank example loads; a newer minor version is refused before init; a 1.0 plugin
// still loads; a refused IO registration names the file and the reason and leaves nothing),
// registration errors, binding to a model (task mismatch, check_model), and the adapter: the
// sequences in order, outputs in order, the plugin's state freed on every path, return codes
// mapped to statuses, limits, misuse, a response that is not JSON, and the /pooling envelope.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>

#include "io/json.h"
#include "io/plugin_io.h"
#include "io/registry.h"

namespace sluice {
namespace {

const std::string kDir = SLUICE_PLUGIN_DIR;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(IoPluginLoader, LoadsTheKeywordRerankExample) {
  auto set = LoadPlugins({kDir + "/keyword_rerank.so", kDir + "/fsm_logits.so"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const IoProcessorEntry* e = (*set)->FindIo("keyword_rerank");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->desc.task, SLUICE_TASK_SCORE);
  EXPECT_TRUE(Contains(e->origin, "keyword_rerank.so"));
  EXPECT_EQ((*set)->IoNames(), "keyword_rerank");
  EXPECT_EQ((*set)->Names(), "fsm");  // logits processors: their own namespace
}

TEST(IoPluginLoader, LoadsTheClipAdapterExampleAndAnAbi11Plugin) {
  auto set = LoadPlugins({kDir + "/clip_adapter.so", kDir + "/keyword_rerank_abi11.so"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const IoProcessorEntry* e = (*set)->FindIo("clip_rank");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->desc.task, SLUICE_TASK_CLIP);
  EXPECT_STREQ(IoTaskName(SLUICE_TASK_CLIP), "clip");
  const IoProcessorEntry* old = (*set)->FindIo("keyword_rerank");
  ASSERT_NE(old, nullptr);  // built against the ABI 1.1 header
  EXPECT_TRUE(Contains(old->origin, "keyword_rerank_abi11.so"));
  ModelContext m;
  m.name = "c";
  m.task = "clip";
  m.output_dim = 4;
  m.clip = m.clip_vision = m.clip_text = true;
  m.model_dir = "/nonexistent/model";
  PluginSet only;
  ASSERT_TRUE(only.RegisterIo(e->desc, e->origin).ok());
  auto bound = io::BindPluginIoProcessors(only, m);  // check_model reads clip_adapter.json
  ASSERT_FALSE(bound.ok());
  EXPECT_TRUE(Contains(bound.status().message(),
                       "IO processor clip_rank refused model \"c\": "
                       "/nonexistent/model/clip_adapter.json"))
      << bound.status().message();
}

TEST(IoPluginLoader, RefusesANewerMinorVersionBeforeInit) {
  auto set = LoadPlugins({kDir + "/test_plugin_newer_minor.so"});
  ASSERT_FALSE(set.ok());
  const std::string m = set.status().message();
  const std::string v = std::to_string(SLUICE_PLUGIN_ABI_VERSION);
  EXPECT_TRUE(Contains(m, "test_plugin_newer_minor.so: plugin needs ABI " + v + "." +
                              std::to_string(SLUICE_PLUGIN_ABI_MINOR + 1) +
                              ", this sluice has ABI " + v + "." +
                              std::to_string(SLUICE_PLUGIN_ABI_MINOR)))
      << m;
  EXPECT_FALSE(Contains(m, "init must not run")) << m;
}

TEST(IoPluginLoader, LoadsAPluginOfTheFirstAbi) {
  auto set = LoadPlugins({kDir + "/test_plugin_minor0.so"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ((*set)->IoNames(), "none");
}

TEST(IoPluginLoader, ARefusedIoRegistrationNamesTheFileAndLeavesNothing) {
  PluginSet set;
  Status st = set.LoadLibrary(kDir + "/test_plugin_bad_io.so");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(),
                       "test_plugin_bad_io.so: sluice_plugin_init failed: IO processor io_bad: "
                       "task 99 is none of"))
      << st.message();
  EXPECT_EQ(set.FindIo("io_ok"), nullptr);
  EXPECT_TRUE(set.io_processors().empty());
}

// ---- a test processor: the body drives it ----
// {"seqs": [[ids], ...], "texts": ["a", ...], "parse_rc": n, "respond_rc": n, "write": "raw",
//  "write_in_parse": true, "big_alloc": true}
std::atomic<int> g_allocs{0}, g_cleanups{0};

struct TestState {
  int respond_rc = 0;
  std::string write;
};

void Cleanup(void* p) {
  static_cast<TestState*>(p)->~TestState();
  g_cleanups++;
}

int TestParse(void*, sluice_io_call* call, const char* body, size_t len, sluice_plugin_error* err) {
  void* mem = call->alloc(call, sizeof(TestState), Cleanup);
  if (mem == nullptr) return sluice_plugin_fail(err, "no memory");
  g_allocs++;
  auto* st = new (mem) TestState();
  call->state = st;
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(body, len).get(obj) != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "not an object: %.*s", static_cast<int>(len), body);
  }
  simdjson::dom::array seqs, texts;
  if (obj["seqs"].get(seqs) == simdjson::SUCCESS) {
    for (auto s : seqs) {
      std::vector<int32_t> ids;
      for (auto v : s) ids.push_back(static_cast<int32_t>(int64_t(v)));
      sluice_plugin_error e{};
      if (call->add_tokens(call, ids.data(), static_cast<int64_t>(ids.size()), nullptr, &e) < 0) {
        return sluice_plugin_fail(err, "add_tokens: %s", e.message);
      }
    }
  }
  if (obj["texts"].get(texts) == simdjson::SUCCESS) {
    for (auto t : texts) {
      std::string_view s = t;
      sluice_plugin_error e{};
      if (call->add_text(call, s.data(), s.size(), nullptr, 0, 0, &e) < 0) {
        return sluice_plugin_fail(err, "add_text: %s", e.message);
      }
    }
  }
  simdjson::dom::array images, pair;
  if (obj["images"].get(images) == simdjson::SUCCESS) {
    if (!SLUICE_IO_CALL_HAS(call, add_image)) return sluice_plugin_fail(err, "no add_image");
    for (auto t : images) {
      std::string_view s = t;
      sluice_plugin_error e{};
      if (call->add_image(call, s.data(), s.size(), &e) < 0) {
        return sluice_plugin_fail(err, "add_image: %s", e.message);
      }
    }
  }
  if (obj["pair"].get(pair) == simdjson::SUCCESS) {
    std::string_view a = pair.at(0), b = pair.at(1);
    sluice_plugin_error e{};
    if (call->add_text(call, a.data(), a.size(), b.data(), b.size(), 0, &e) < 0) {
      return sluice_plugin_fail(err, "add_text: %s", e.message);
    }
  }
  int64_t rc = 0;
  if (obj["respond_rc"].get(rc) == simdjson::SUCCESS) st->respond_rc = static_cast<int>(rc);
  std::string_view w;
  if (obj["write"].get(w) == simdjson::SUCCESS) st->write = std::string(w);
  bool flag = false;
  if (obj["write_in_parse"].get(flag) == simdjson::SUCCESS && flag) call->write(call, "x", 1);
  if (obj["big_alloc"].get(flag) == simdjson::SUCCESS && flag) {
    if (call->alloc(call, io::kPluginRequestMemory + 1, nullptr) != nullptr) {
      return sluice_plugin_fail(err, "a too big allocation succeeded");
    }
    return sluice_plugin_fail(err, "alloc refused");
  }
  if (obj["parse_rc"].get(rc) == simdjson::SUCCESS) {
    sluice_plugin_fail(err, "parse says %d", static_cast<int>(rc));
    return static_cast<int>(rc);
  }
  return 0;
}

int TestRespond(void*, sluice_io_call* call, const sluice_io_output* outs, int32_t n,
                sluice_plugin_error* err) {
  const auto* st = static_cast<const TestState*>(call->state);
  if (st->respond_rc != 0) {
    sluice_plugin_fail(err, "respond says %d", st->respond_rc);
    return st->respond_rc;
  }
  if (!st->write.empty()) {
    call->write(call, st->write.data(), st->write.size());
    return 0;
  }
  call->write(call, "[", 1);
  for (int32_t i = 0; i < n; ++i) {
    if (i > 0) call->write(call, ",", 1);
    call->write_float(call, outs[i].values[0]);
  }
  call->write(call, ",", 1);
  call->write_string(call, "a\"b", 3);
  call->write(call, "]", 1);
  return 0;
}

ModelContext TestModel() {
  ModelContext m;
  m.name = "m";
  m.task = "embed";
  m.output_dim = 2;
  m.max_inputs_per_request = 4;
  m.max_tokens_per_input = 8;
  m.model_max_tokens = 8;
  return m;
}

class IoAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    sluice_io_processor p{};
    p.struct_size = sizeof p;
    p.name = "echo";
    p.task = SLUICE_TASK_EMBED;
    p.parse = TestParse;
    p.respond = TestRespond;
    ASSERT_TRUE(set_.RegisterIo(p, "test.so").ok());
    auto bound = io::BindPluginIoProcessors(set_, model_);
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    ASSERT_EQ(bound->size(), 1u);
    proc_ = (*bound)[0];
    g_allocs = 0;
    g_cleanups = 0;
  }

  // Parse + PreProcess + PostProcess with outputs values {i * 1.5, 0}; on /pooling the
  // server's envelope around them (io/registry.h), as server/service.cc runs it.
  StatusOr<std::string> Run(const std::string& body, const char* route = "/plugins/echo",
                            std::vector<TokenSequence>* seqs_out = nullptr) {
    const bool pooling = std::string_view(route) == "/pooling";
    std::string data;
    if (pooling) {
      ASSIGN_OR_RETURN(data, io::PoolingIoData(model_, body));
    }
    IoRequest req{route, pooling ? std::string_view(data) : std::string_view(body), &model_};
    auto st = proc_->Parse(req);
    if (!st.ok()) return st.status();
    std::vector<TokenSequence> seqs;
    RETURN_IF_ERROR(proc_->PreProcess(model_, **st, &seqs));
    std::vector<PooledOutput> outs(seqs.size());
    for (size_t i = 0; i < outs.size(); ++i) outs[i].values = {1.5f * static_cast<float>(i), 0.f};
    if (seqs_out) *seqs_out = seqs;
    auto r = proc_->PostProcess(model_, **st, outs);
    if (!r.ok()) return r.status();
    if (pooling) return io::PoolingIoResponse(model_, proc_->name(), r->body, (*st)->prompt_tokens);
    return r->body;
  }

  PluginSet set_;
  ModelContext model_ = TestModel();
  std::shared_ptr<const io::PluginIoProcessor> proc_;
};

TEST_F(IoAdapter, SequencesAndOutputsInOrderAndStateFreed) {
  std::vector<TokenSequence> seqs;
  auto r = Run(R"({"seqs": [[5, 6, 7], [1], [5, 6, 7]]})", "/plugins/echo", &seqs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, R"([0,1.5,3,"a\"b"])");
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[0].ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(seqs[1].ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(g_allocs.load(), 1);
  EXPECT_EQ(g_cleanups.load(), 1);  // the state went with the request
  EXPECT_EQ(proc_->model_info().max_inputs, 4);
  EXPECT_STREQ(proc_->model_info().task, "embed");
}

TEST_F(IoAdapter, ErrorsMapToStatusesAndFreeTheState) {
  struct Case {
    const char* body;
    StatusCode code;
    const char* message;
  } cases[] = {
      {"not json", StatusCode::kInvalidArgument, "echo: not an object: not json"},
      {R"({"parse_rc": 1})", StatusCode::kInvalidArgument, "echo: parse says 1"},
      {R"({"parse_rc": 404})", StatusCode::kNotFound, "echo: parse says 404"},
      {R"({"parse_rc": 429})", StatusCode::kResourceExhausted, "echo: parse says 429"},
      {R"({"parse_rc": 503})", StatusCode::kUnavailable, "echo: parse says 503"},
      {R"({"respond_rc": 1})", StatusCode::kInternal, "echo: respond says 1"},
      {R"({"respond_rc": 400})", StatusCode::kInvalidArgument, "echo: respond says 400"},
      {R"({"respond_rc": 500})", StatusCode::kInternal, "echo: respond says 500"},
      {R"({"seqs": [[1], [2], [3], [4], [5]]})", StatusCode::kInvalidArgument,
       "more than 4 sequences in one request"},
      {R"({"seqs": [[1, 2, 3, 4, 5, 6, 7, 8, 9]]})", StatusCode::kInvalidArgument,
       "\"sequence[0]\" has 9 tokens, over the limit of 8"},
      {R"({"seqs": [[]]})", StatusCode::kInvalidArgument, "sequence[0]: no token ids"},
      {R"({"texts": ["hello"]})", StatusCode::kInvalidArgument, "has no tokenizer.json"},
      {R"({"write": "{\"a\": "})", StatusCode::kInternal, "the plugin's response is not JSON"},
      {R"({"write_in_parse": true})", StatusCode::kInternal, "write called outside respond"},
      {R"({"big_alloc": true})", StatusCode::kInvalidArgument, "echo: alloc refused"},
  };
  int n = 0;
  for (const Case& c : cases) {
    auto r = Run(c.body);
    ++n;
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), c.code) << c.body << ": " << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), c.message))
        << c.body << ": " << r.status().message();
    EXPECT_EQ(g_cleanups.load(), g_allocs.load()) << c.body;
  }
  EXPECT_EQ(g_allocs.load(), n);
  EXPECT_EQ(g_cleanups.load(), n);
}

TEST_F(IoAdapter, PoolingEnvelope) {
  auto r =
      Run(R"({"model": "m", "io_processor": "echo", "data": {"seqs": [[1], [2]]}})", "/pooling");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto obj = io::ParseObject(*r);
  ASSERT_TRUE(obj.ok()) << *r;
  std::string_view s;
  ASSERT_EQ((*obj)["object"].get(s), simdjson::SUCCESS);
  EXPECT_EQ(s, "io_processor");
  ASSERT_EQ((*obj)["io_processor"].get(s), simdjson::SUCCESS);
  EXPECT_EQ(s, "echo");
  EXPECT_EQ(simdjson::to_string((*obj)["data"]), R"([0,1.5,"a\"b"])");
  int64_t tokens = 0;
  ASSERT_EQ((*obj)["usage"]["prompt_tokens"].get(tokens), simdjson::SUCCESS);
  EXPECT_EQ(tokens, 2);
  auto missing = Run(R"({"io_processor": "echo"})", "/pooling");
  EXPECT_TRUE(Contains(missing.status().message(), "data")) << missing.status().message();
  auto unknown = Run(R"({"io_processor": "echo", "data": {}, "input": "x"})", "/pooling");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(unknown.status().message(), "input")) << unknown.status().message();
  auto other = Run(R"({"io_processor": "echo", "data": {}, "model": "x"})", "/pooling");
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
}

TEST_F(IoAdapter, AddImageOnATextModelFailsCleanly) {
  EXPECT_TRUE(SLUICE_IO_MODEL_HAS(&proc_->model_info(), model_dir));
  auto r = Run(R"({"seqs": [[1]], "images": ["http://example.com/a.png"]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(),
                       "echo: add_image: sequence[1]: add_image needs a CLIP model "
                       "(SLUICE_TASK_CLIP); model \"m\" is served with task embed"))
      << r.status().message();
  EXPECT_EQ(g_cleanups.load(), g_allocs.load());
}

ModelContext ClipModelContext() {
  ModelContext m = TestModel();
  m.name = "c";
  m.task = "clip";
  m.output_dim = 3;
  m.clip = true;
  m.clip_vision = true;
  m.clip_text = true;
  m.model_dir = "/models/c/3/";
  return m;
}

class ClipIoAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    sluice_io_processor p{};
    p.struct_size = sizeof p;
    p.name = "echo";
    p.task = SLUICE_TASK_CLIP;
    p.parse = TestParse;
    p.respond = TestRespond;
    ASSERT_TRUE(set_.RegisterIo(p, "test.so").ok());
  }
  StatusOr<std::vector<io::PluginClipInput>> Parse(const ModelContext& m, const std::string& body) {
    auto bound = io::BindPluginIoProcessors(set_, m);
    if (!bound.ok()) return bound.status();
    proc_ = (*bound)[0];
    IoRequest req{"/plugins/echo", body, &m};
    auto st = proc_->Parse(req);
    if (!st.ok()) return st.status();
    std::vector<TokenSequence> seqs;
    RETURN_IF_ERROR(proc_->PreProcess(m, **st, &seqs));
    EXPECT_TRUE(seqs.empty());  // a CLIP model's inputs are not engine sequences
    auto in = io::PluginIoProcessor::TakeClipInputs(**st);
    std::vector<PooledOutput> outs(in.size());
    for (size_t i = 0; i < outs.size(); ++i) outs[i].values = {0.5f * static_cast<float>(i)};
    auto r = proc_->PostProcess(m, **st, outs);
    if (!r.ok()) return r.status();
    body_ = r->body;
    return in;
  }
  PluginSet set_;
  std::shared_ptr<const io::PluginIoProcessor> proc_;
  std::string body_;
};

TEST_F(ClipIoAdapter, ImagesAndTextsInOrder) {
  const ModelContext m = ClipModelContext();
  auto in = Parse(m, R"({"seqs": [[7, 2]], "images": ["http://h/a.png", "data:x"]})");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->size(), 3u);
  EXPECT_FALSE((*in)[0].image);
  EXPECT_EQ((*in)[0].ids, (std::vector<int32_t>{7, 2}));
  EXPECT_EQ((*in)[0].path, "sequence[0]");
  EXPECT_TRUE((*in)[1].image);
  EXPECT_EQ((*in)[1].source, "http://h/a.png");
  EXPECT_EQ((*in)[1].path, "sequence[1]");
  EXPECT_EQ((*in)[2].source, "data:x");
  EXPECT_EQ(body_, R"([0,0.5,1,"a\"b"])");
  EXPECT_STREQ(proc_->model_info().task, "clip");
  EXPECT_STREQ(proc_->model_info().model_dir, "/models/c/3");
  EXPECT_EQ(proc_->model_info().output_dim, 3);
}

TEST_F(ClipIoAdapter, Refusals) {
  ModelContext m = ClipModelContext();
  struct Case {
    const char* body;
    const char* message;
  } cases[] = {
      {R"({"images": ["a", "b", "c", "d", "e"]})", "more than 4 sequences in one request"},
      {R"({"seqs": [[1], [2]], "images": ["a", "b", "c"]})", "more than 4 sequences"},
      {R"({"images": [""]})", "sequence[0]: an empty image source"},
      {R"({"texts": ["hello"]})", "sequence[0]: this model has no tokenizer.json"},
      {R"({"pair": ["a", "b"]})", "a text pair, but a CLIP model embeds one text at a time"},
      {R"({"seqs": [[1, 2, 3, 4, 5, 6, 7, 8, 9]]})", "has 9 tokens, over the limit of 8"},
  };
  for (const Case& c : cases) {
    auto r = Parse(m, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_TRUE(Contains(r.status().message(), c.message))
        << c.body << ": " << r.status().message();
  }
  m.clip_vision = false;
  auto r = Parse(m, R"({"images": ["a"]})");
  EXPECT_TRUE(Contains(r.status().message(),
                       "sequence[0]: an image, but CLIP model \"c\" has "
                       "no vision tower"))
      << r.status().message();
  m.clip_vision = true;
  m.clip_text = false;
  r = Parse(m, R"({"seqs": [[1]]})");
  EXPECT_TRUE(Contains(r.status().message(),
                       "sequence[0]: a text, but CLIP model \"c\" has no "
                       "text tower"))
      << r.status().message();
  EXPECT_EQ(g_cleanups.load(), g_allocs.load());
}

TEST_F(ClipIoAdapter, TaskMustMatch) {
  ModelContext m = TestModel();  // embed: a CLIP processor does not bind
  auto bound = io::BindPluginIoProcessors(set_, m);
  ASSERT_FALSE(bound.ok());
  EXPECT_TRUE(Contains(bound.status().message(),
                       "IO processor echo needs a model with task clip; model \"m\" is served "
                       "with task embed"))
      << bound.status().message();
}

TEST(IoPluginBinding, TaskMismatchAndCheckModel) {
  auto set = LoadPlugins({kDir + "/keyword_rerank.so"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ModelContext m = TestModel();  // embed
  auto wrong = io::BindPluginIoProcessors(**set, m);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status().message(),
                       "keyword_rerank.so: IO processor keyword_rerank needs a model with task "
                       "score; model \"m\" is served with task embed"))
      << wrong.status().message();
  m.task = "score";  // no tokenizer: its check_model refuses
  auto refused = io::BindPluginIoProcessors(**set, m);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(),
                       "IO processor keyword_rerank refused model \"m\": needs the model's "
                       "tokenizer"))
      << refused.status().message();
}

int Parse0(void*, sluice_io_call*, const char*, size_t, sluice_plugin_error*) { return 0; }
int Respond0(void*, sluice_io_call*, const sluice_io_output*, int32_t, sluice_plugin_error*) {
  return 0;
}

// A plugin processor may not take a built-in's name (they share one registry per model):
// binding it fails naming the file, the processor and the reserved names; a registry refuses
// it too, and a duplicate plugin name.
TEST(IoPluginBinding, BuiltinNamesAreReserved) {
  for (const char* name : {"embed", "embeddings", "rerank", "score", "classify", "token-classify",
                           "tokenize", "pooling", "rerank-v2"}) {
    PluginSet set;
    sluice_io_processor p{};
    p.struct_size = sizeof p;
    p.name = name;
    p.task = SLUICE_TASK_EMBED;
    p.parse = Parse0;
    p.respond = Respond0;
    ASSERT_TRUE(set.RegisterIo(p, "/lib/clash.so").ok()) << name;
    auto bound = io::BindPluginIoProcessors(set, TestModel());
    ASSERT_FALSE(bound.ok()) << name;
    EXPECT_EQ(bound.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(bound.status().message(),
                         std::string("plugin /lib/clash.so: IO processor ") + name +
                             ": the name is reserved by a built-in IO processor (embeddings, "
                             "embed, pooling, classify, predict, score, rerank, rerank-v2, "
                             "token-classify, absa, tokenize, detokenize)"))
        << bound.status().message();
  }
  PluginSet set;
  sluice_io_processor p{};
  p.struct_size = sizeof p;
  p.name = "mine";
  p.task = SLUICE_TASK_EMBED;
  p.parse = Parse0;
  p.respond = Respond0;
  ASSERT_TRUE(set.RegisterIo(p, "/lib/a.so").ok());
  auto bound = io::BindPluginIoProcessors(set, TestModel());
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  io::ProcessorRegistry reg;
  ASSERT_TRUE(reg.AddPlugin((*bound)[0], "/lib/a.so").ok());
  EXPECT_EQ(reg.Find("mine"), (*bound)[0].get());
  EXPECT_EQ(reg.PluginNames(), "mine");
  auto twice = reg.AddPlugin((*bound)[0], "/lib/b.so");
  EXPECT_TRUE(Contains(twice.message(), "IO processor mine is already registered by /lib/a.so"))
      << twice.message();
  EXPECT_EQ(reg.FindRoute("/v1/rerank"), reg.Find("rerank"));
  EXPECT_EQ(reg.FindRoute("/rerank"), reg.Find("rerank"));
  EXPECT_EQ(reg.FindRoute("/v2/rerank"), reg.Find("rerank-v2"));
  EXPECT_EQ(reg.FindRoute("/v1/embeddings"), reg.Find("embeddings"));
  EXPECT_EQ(reg.FindRoute("/plugins/mine"), nullptr);
  for (const io::ProcessorEntry& e : reg.entries()) {
    EXPECT_EQ(e.builtin, e.origin == "built-in") << e.processor->name();
    EXPECT_EQ(e.builtin, io::ProcessorRegistry::IsBuiltinName(e.processor->name()));
  }
}

TEST(IoPluginRegistration, Errors) {
  PluginSet set;
  sluice_io_processor p{};
  p.struct_size = sizeof p;
  p.name = "ok";
  p.task = SLUICE_TASK_CLASSIFY;
  p.parse = Parse0;
  p.respond = Respond0;
  ASSERT_TRUE(set.RegisterIo(p, "a.so").ok());
  EXPECT_TRUE(Contains(set.RegisterIo(p, "b.so").message(),
                       "IO processor ok is already registered by a.so"));
  sluice_io_processor bad = p;
  bad.name = "";
  EXPECT_TRUE(Contains(set.RegisterIo(bad, "b.so").message(), "needs a name"));
  bad.name = "a/b";
  EXPECT_TRUE(Contains(set.RegisterIo(bad, "b.so").message(), "only letters"));
  bad = p;
  bad.name = "norespond";
  bad.respond = nullptr;
  EXPECT_TRUE(Contains(set.RegisterIo(bad, "b.so").message(), "parse and respond are required"));
  bad = p;
  bad.name = "small";
  bad.struct_size = 8;
  EXPECT_TRUE(Contains(set.RegisterIo(bad, "b.so").message(), "struct_size 8"));
  bad = p;
  bad.name = "notask";
  bad.task = 0;
  EXPECT_TRUE(Contains(set.RegisterIo(bad, "b.so").message(), "task 0"));
  EXPECT_EQ(set.IoNames(), "ok");
}

}  // namespace
}  // namespace sluice
