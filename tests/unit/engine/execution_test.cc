// Pipelined execution and CUDA-graph bookkeeping that does not need a GPU: the graph
// buckets, input packing (padding included), Engine::Submit/Complete (order, outputs
// written only at Complete, limits, errors) and Engine::Run with two batches in flight
// equal to running the same batches one at a time, bit for bit, for every pooling kind.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <climits>

#include "../../golden/golden_inputs.h"
#include "engine/engine.h"
#include "engine/graph_buckets.h"

namespace sluice {
namespace {

const std::string kFixtures = SLUICE_FIXTURES_DIR;

std::vector<TokenSequence> GoldenInputs(const std::string& name) {
  return testing::GoldenInputs(kFixtures, name);
}

std::unique_ptr<Engine> Load(const std::string& name, int64_t max_batch_tokens = 8192,
                             PrefixReuse prefix = PrefixReuse::kAuto,
                             CudaGraphs graphs = CudaGraphs::kAuto) {
  EngineOptions o;
  o.model_dir = kFixtures + "/models/" + name;
  o.backend.num_threads = 2;
  o.max_batch_tokens = max_batch_tokens;
  o.prefix_reuse = prefix;
  o.cuda_graphs = graphs;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(GraphBuckets, Ladder) {
  EXPECT_EQ(GraphBuckets(4096),
            (std::vector<int64_t>{16,   32,   48,   64,   80,   96,   112,  128, 160, 192,
                                  224,  256,  320,  384,  448,  512,  640,  768, 896, 1024,
                                  1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096}));
  EXPECT_EQ(GraphBuckets(100), (std::vector<int64_t>{16, 32, 48, 64, 80, 96, 100}));
  EXPECT_EQ(GraphBuckets(16), (std::vector<int64_t>{16}));
  EXPECT_EQ(GraphBuckets(10), (std::vector<int64_t>{10}));
  EXPECT_TRUE(GraphBuckets(0).empty());
  EXPECT_TRUE(GraphBuckets(-3).empty());
  // Padding: below half of the bucket above 16 tokens, below 20% above 64; multiples of 16.
  const auto b = GraphBuckets(65536);
  for (int64_t k : b) EXPECT_EQ(k % 16, 0) << k;
  for (int64_t t = 1; t <= 65536; t = t < 300 ? t + 1 : t * 9 / 8) {
    const int64_t k = GraphBucketFor(b, t);
    ASSERT_GE(k, t);
    if (t > 16) {
      EXPECT_LT(2 * (k - t), k) << t;
    }
    if (t > 64) {
      EXPECT_LT(5 * (k - t), k) << t;
    }
  }
}

TEST(GraphBuckets, SmallestBucketHoldingTheTokens) {
  const auto b = GraphBuckets(4096);
  EXPECT_EQ(GraphBucketFor(b, 1), 16);
  EXPECT_EQ(GraphBucketFor(b, 16), 16);
  EXPECT_EQ(GraphBucketFor(b, 17), 32);
  EXPECT_EQ(GraphBucketFor(b, 150), 160);
  EXPECT_EQ(GraphBucketFor(b, 2800), 3072);
  EXPECT_EQ(GraphBucketFor(b, 4096), 4096);
  EXPECT_EQ(GraphBucketFor(b, 4097), 0);
  EXPECT_EQ(GraphBucketFor({}, 5), 0);
}

// Inputs packed into a padded layout (a graph bucket): the batch's values first, then
// padding; RoBERTa's position offset and a shared prefix's continuing positions.
TEST(PackInputs, PaddedLayoutWithOffsetsAndPrefix) {
  auto roberta = Load("roberta_cross_encoder");
  ASSERT_NE(roberta, nullptr);
  ForwardBatch b;
  b.Add({5, 6, 7}, {0, 1, 1});
  b.Add({8, 9}, {}, 1);  // only its first token is a key (ColBERT expansion)
  EXPECT_EQ(b.key_lens, (std::vector<int32_t>{INT32_MAX, 1}));
  const InputLayout l{8, 4};
  EXPECT_EQ(l.size(), 3 * 8 + 4 * 4 + 1);  // + cu_seqlens, rows, prefix_of, key_lens
  std::vector<int32_t> host(l.size(), -1);
  roberta->model().PackInputs(b, l, OutputRows::kLast, host.data());
  const int off = 2;  // pad_token_id 1 + 1
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.ids(), host.begin() + l.ids() + 8),
            (std::vector<int32_t>{5, 6, 7, 8, 9, 0, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.types(), host.begin() + l.types() + 8),
            (std::vector<int32_t>{0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.positions(), host.begin() + l.positions() + 8),
            (std::vector<int32_t>{off, off + 1, off + 2, off, off + 1, 0, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.cu_seqlens(), host.begin() + l.cu_seqlens() + 5),
            (std::vector<int32_t>{0, 3, 5, 5, 5}));
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.rows(), host.begin() + l.rows() + 4),
            (std::vector<int32_t>{2, 4, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(host.begin() + l.key_lens(), host.begin() + l.key_lens() + 4),
            (std::vector<int32_t>{INT32_MAX, 1, INT32_MAX, INT32_MAX}));
  const Tensor bdev{host.data(), DType::kI32, 1, l.size(), 0};
  EXPECT_EQ(roberta->model().BindInputs(b, l, OutputRows::kNone, bdev).key_lens.ptr<int32_t>(),
            host.data() + l.key_lens());
  roberta->model().PackInputs(b, l, OutputRows::kFirst, host.data());
  EXPECT_EQ(host[l.rows()], 0);
  EXPECT_EQ(host[l.rows() + 1], 3);

  auto qwen = Load("qwen3_reranker");
  ASSERT_NE(qwen, nullptr);
  ForwardBatch p;  // a 4-token prefix, then two sequences' own tokens
  const int32_t pre[] = {1, 2, 3, 4}, a[] = {10, 11}, b1[] = {12};
  p.AddWithPrefix(pre, 4, -1);
  p.AddWithPrefix(a, 2, 0);
  p.AddWithPrefix(b1, 1, 0);
  const InputLayout e{7, 3};  // exact
  std::vector<int32_t> h2(e.size(), -1);
  qwen->model().PackInputs(p, e, OutputRows::kNone, h2.data());
  EXPECT_EQ(std::vector<int32_t>(h2.begin() + e.positions(), h2.begin() + e.positions() + 7),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 4}));
  EXPECT_EQ(std::vector<int32_t>(h2.begin() + e.rows(), h2.begin() + e.rows() + 3),
            (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(h2.begin() + e.prefix_of(), h2.begin() + e.prefix_of() + 3),
            (std::vector<int32_t>{-1, 0, 0}));
  const Tensor dev{h2.data(), DType::kI32, 1, e.size(), 0};
  const DeviceBatch d = qwen->model().BindInputs(p, e, OutputRows::kLast, dev);
  EXPECT_EQ(d.num_tokens, 7);
  EXPECT_EQ(d.num_seqs, 3);
  EXPECT_EQ(d.prefix_of.ptr<int32_t>(), h2.data() + e.prefix_of());
  EXPECT_EQ(d.max_context, 6);
  EXPECT_EQ(d.positions.ptr<int32_t>(), h2.data() + e.positions());
  EXPECT_EQ(d.cu_seqlens.ptr<int32_t>(), h2.data() + e.cu_seqlens());
  EXPECT_EQ(d.output_rows.ptr<int32_t>(), h2.data() + e.rows());
  EXPECT_EQ(d.num_output_rows, 3);
  EXPECT_EQ(qwen->model().BindInputs(p, e, OutputRows::kNone, dev).output_rows.data, nullptr);
  // Without prefixes prefix_of is bound only for recordings (which replay any batch).
  ForwardBatch plain;
  plain.Add({1, 2, 3});
  EXPECT_EQ(qwen->model().BindInputs(plain, e, OutputRows::kNone, dev).prefix_of.data, nullptr);
  EXPECT_EQ(
      qwen->model().BindInputs(plain, e, OutputRows::kNone, dev, true).prefix_of.ptr<int32_t>(),
      h2.data() + e.prefix_of());
  // Key limits likewise (all INT32_MAX without any).
  EXPECT_EQ(qwen->model().BindInputs(plain, e, OutputRows::kNone, dev).key_lens.data, nullptr);
  EXPECT_EQ(
      qwen->model().BindInputs(plain, e, OutputRows::kNone, dev, true).key_lens.ptr<int32_t>(),
      h2.data() + e.key_lens());
  EXPECT_EQ(std::vector<int32_t>(h2.begin() + e.key_lens(), h2.begin() + e.key_lens() + 3),
            (std::vector<int32_t>(3, INT32_MAX)));
}

// The batches Run forms (input order under the budget), run one at a time.
std::vector<PooledOutput> Serial(Engine& e, const std::vector<TokenSequence>& inputs,
                                 int64_t budget) {
  std::vector<PooledOutput> out(inputs.size());
  std::vector<const TokenSequence*> group;
  size_t start = 0;
  int64_t tokens = 0;
  auto flush = [&] {
    if (group.empty()) return;
    EXPECT_TRUE(e.RunBatch(group, out.data() + start).ok());
    EXPECT_EQ(e.in_flight(), 0);
    start += group.size();
    group.clear();
    tokens = 0;
  };
  for (const auto& in : inputs) {
    const int64_t n = static_cast<int64_t>(in.ids.size());
    if (!group.empty() && tokens + n > budget) flush();
    group.push_back(&in);
    tokens += n;
  }
  flush();
  return out;
}

void ExpectSame(const std::vector<PooledOutput>& a, const std::vector<PooledOutput>& b,
                const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].values, b[i].values) << what << " input " << i;
    EXPECT_EQ(a[i].raw, b[i].raw) << what << " input " << i;
    EXPECT_EQ(a[i].rows, b[i].rows) << what << " input " << i;
    EXPECT_EQ(a[i].token_indices, b[i].token_indices) << what << " input " << i;
  }
}

// CLS (BERT pooler + classifier), LAST (yes/no reranker, with and without a shared
// prefix), MEAN, MAX, ALL and STEP pooling: Run keeps two batches in flight and gives
// exactly the outputs of the same batches run one by one.
TEST(PipelinedRun, EqualsSerialBatchesBitForBit) {
  for (const std::string name : {"bert_cross_encoder", "qwen3_reranker", "xlmr_st_mean",
                                 "roberta_st_max", "bert_pool_all", "qwen3_pool_step"}) {
    for (int64_t budget : {int64_t{60}, int64_t{200}}) {
      auto pipelined = Load(name, budget);
      auto serial = Load(name, budget);
      ASSERT_NE(pipelined, nullptr);
      ASSERT_NE(serial, nullptr);
      auto inputs = GoldenInputs(name);
      int progress_calls = 0;
      size_t last_done = 0;
      auto got = pipelined->Run(inputs, [&](size_t done, size_t total, int64_t) {
        EXPECT_GT(done, last_done);
        EXPECT_EQ(total, inputs.size());
        last_done = done;
        ++progress_calls;
      });
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(last_done, inputs.size());
      EXPECT_GT(progress_calls, 2) << "several batches";
      EXPECT_EQ(pipelined->in_flight(), 0);
      ExpectSame(*got, Serial(*serial, inputs, budget), name + " budget " + std::to_string(budget));
    }
  }
  // Shared prefixes through the pipeline: every batch has one (the prefix batch and the
  // outputs of each slot stay apart).
  auto on = Load("qwen3_reranker", 120, PrefixReuse::kOn);
  auto serial = Load("qwen3_reranker", 120, PrefixReuse::kOn);
  std::vector<TokenSequence> inputs;
  for (const auto& in : GoldenInputs("qwen3_reranker")) {
    TokenSequence x;
    x.ids = {7, 8, 9, 10, 11, 12};
    x.ids.insert(x.ids.end(), in.ids.begin(), in.ids.end());
    inputs.push_back(std::move(x));
  }
  auto got = on->Run(inputs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(on->prefix_reuse_stats().batches, 3);
  ExpectSame(*got, Serial(*serial, inputs, 120), "qwen3_reranker with a shared prefix");
}

TEST(Submit, OutputsAreWrittenAtCompleteInOrder) {
  auto e = Load("bert_cross_encoder");
  ASSERT_NE(e, nullptr);
  const auto inputs = GoldenInputs("bert_cross_encoder");
  auto want = e->Run(inputs);
  ASSERT_TRUE(want.ok());
  ForwardBatch a, b;
  for (int i = 0; i < 5; ++i) a.Add(inputs[i].ids, inputs[i].type_ids);
  for (int i = 5; i < 8; ++i) b.Add(inputs[i].ids, inputs[i].type_ids);
  std::vector<PooledOutput> out(8);
  ASSERT_TRUE(e->Submit(a, out.data()).ok());
  a.Clear();  // the batch may be reused once Submit returns
  ASSERT_TRUE(e->Submit(b, out.data() + 5).ok());
  EXPECT_EQ(e->in_flight(), 2);
  for (const auto& o : out) EXPECT_TRUE(o.values.empty()) << "written before Complete";
  // A third batch needs room.
  Status full = e->Submit(b, out.data());
  EXPECT_EQ(full.code(), StatusCode::kFailedPrecondition) << full.ToString();
  EXPECT_EQ(e->in_flight(), 2);
  ASSERT_TRUE(e->Complete().ok());
  EXPECT_FALSE(out[4].values.empty());
  EXPECT_TRUE(out[5].values.empty()) << "the second batch completes second";
  ASSERT_TRUE(e->Complete().ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i].values, (*want)[i].values) << i;
  EXPECT_EQ(e->Complete().code(), StatusCode::kFailedPrecondition);
}

TEST(Submit, InvalidBatchQueuesNothing) {
  auto e = Load("bert_cross_encoder");
  ASSERT_NE(e, nullptr);
  const auto inputs = GoldenInputs("bert_cross_encoder");
  ForwardBatch good, bad;
  good.Add(inputs[0].ids, inputs[0].type_ids);
  // Token ids are admitted before batches are packed (engine/admission.h); what Submit
  // still refuses is a malformed batch, e.g. a shared prefix on a model without prefix reuse.
  const int32_t ids[] = {101, 7, 102};
  bad.AddWithPrefix(ids, 3, -1);
  bad.AddWithPrefix(ids, 3, 0);
  std::vector<PooledOutput> out(3);
  ASSERT_TRUE(e->Submit(good, out.data()).ok());
  Status s = e->Submit(bad, out.data() + 1);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_EQ(e->in_flight(), 1);
  ASSERT_TRUE(e->Complete().ok());
  EXPECT_FALSE(out[0].values.empty());
  EXPECT_TRUE(out[1].values.empty());
  // Abandon drops what is in flight and leaves the outputs alone.
  std::vector<PooledOutput> dropped(1);
  ASSERT_TRUE(e->Submit(good, dropped.data()).ok());
  e->Abandon();
  EXPECT_EQ(e->in_flight(), 0);
  EXPECT_TRUE(dropped[0].values.empty());
}

// An invalid input is refused at admission, before any batch runs: the error names the
// input, nothing is in flight, and the engine stays usable.
TEST(PipelinedRun, InvalidInputIsRefusedBeforeAnyBatch) {
  auto e = Load("bert_cross_encoder", 60);
  ASSERT_NE(e, nullptr);
  auto inputs = GoldenInputs("bert_cross_encoder");
  inputs[20].ids[1] = 1 << 20;  // outside the vocabulary
  int batches_run = 0;
  auto r = e->Run(inputs, [&](size_t, size_t, int64_t) { ++batches_run; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(batches_run, 0);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("input 20: token id"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(e->in_flight(), 0);
  inputs[20].ids[1] = 5;
  EXPECT_TRUE(e->Run(inputs).ok());
}

// EngineOptions batch limits of 0 resolve to the device's defaults at load (library users
// get the same limits as the CLI); explicit values are kept; negative ones are refused.
TEST(EngineOptions, BatchLimitsDefaultPerDevice) {
  EngineOptions o;
  o.model_dir = kFixtures + "/models/qwen3_reranker";
  o.backend.num_threads = 2;
  auto e = Engine::Load(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->options().max_batch_tokens, kCpuMaxBatchTokens);
  EXPECT_EQ((*e)->options().max_num_seqs, kCpuMaxNumSeqs);
  o.max_batch_tokens = 300;
  o.max_num_seqs = 7;
  auto f = Engine::Load(o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->options().max_batch_tokens, 300);
  EXPECT_EQ((*f)->options().max_num_seqs, 7);
  o.max_num_seqs = -1;
  auto g = Engine::Load(o);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
}

TEST(CudaGraphs, OffOnTheCpuAndRefusedWhenForced) {
  auto e = Load("qwen3_reranker");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->graph_buckets().empty());
  EngineOptions o;
  o.model_dir = kFixtures + "/models/qwen3_reranker";
  o.cuda_graphs = CudaGraphs::kOn;
  auto forced = Engine::Load(o);
  ASSERT_FALSE(forced.ok());
  EXPECT_EQ(forced.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(forced.status().message().find("need a CUDA device"), std::string::npos);
  o.cuda_graphs = CudaGraphs::kAuto;
  o.cuda_graph_max_tokens = -1;
  EXPECT_EQ(Engine::Load(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
