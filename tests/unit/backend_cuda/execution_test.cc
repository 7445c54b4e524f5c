// Asynchronous execution on CUDA: pinned staging and asynchronous copies with fences,
// recorded forwards (CUDA graphs) replayed bit for bit against eager runs of the same
// shapes, and the engine's pipelined, graph-replaying execution against its eager serial
// path. Skipped without a CUDA device.
//
// Exactness: a replay runs the very kernels of an eager run of the same shapes (same GEMM
// algorithms, same attention tiling), so results are bit-identical; padding a batch to its
// bucket changes the GEMMs' row count M, so the engine with graphs equals the engine
// without within fp32 rounding (1e-5, the batch-invariance tolerance), and bit for bit
// when the batch fills its bucket exactly.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "../../golden/golden_inputs.h"
#include "backend/backend.h"
#include "compare.h"
#include "engine/engine.h"

namespace sluice {
namespace {

using cuda_test::Random;

std::unique_ptr<Backend> Cuda() {
  auto g = CreateBackend(BackendOptions{DeviceKind::kCuda, 0, 0});
  return g.ok() ? std::move(g).value() : nullptr;
}

#define REQUIRE_CUDA(be) \
  if (!(be)) GTEST_SKIP() << "no CUDA device"

// Host -> device from pinned memory, device work, device -> pinned host (f32 and bf16
// sources, strided), fenced; the staging is refilled once the fence has passed. The CPU
// backend's synchronous defaults give the same values.
TEST(CudaExecution, PinnedAsyncCopiesAndFences) {
  auto gpu = Cuda();
  REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend(BackendOptions{DeviceKind::kCpu, 0, 2});
  ASSERT_TRUE(cpu.ok());
  for (Backend* be : {gpu.get(), cpu->get()}) {
    const int64_t rows = 37, cols = 70;
    const size_t n = static_cast<size_t>(rows * cols);
    HostBuffer in = be->AllocateHost(n * sizeof(float));
    HostBuffer out = be->AllocateHost(n * sizeof(float));
    HostBuffer half = be->AllocateHost(n / 2 * sizeof(float));
    ASSERT_GE(in.size(), n * sizeof(float));
    Buffer d = be->Allocate(DType::kF32, rows, cols);
    Buffer d2 = be->Allocate(DType::kF32, rows, cols);
    auto fence = be->CreateFence();
    fence->Wait();  // never recorded: complete
    for (int round = 0; round < 3; ++round) {
      const auto v = Random(n, 10 + round);
      std::memcpy(in.data(), v.data(), n * sizeof(float));
      be->CopyFromHostAsync(in.data(), d.t());
      be->Add(d.t(), d.t(), d2.t());
      be->CopyToHostF32Async(d2.t(), out.as<float>());
      fence->Record();
      fence->Wait();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out.as<float>()[i], 2 * v[i]) << i;
      if (be == gpu.get()) {  // a strided bf16 view (the right half of every row)
        HostTensor h{v.data(), DType::kF32, {rows, cols}, "v"};
        auto up = be->Upload(h, DType::kBF16);
        ASSERT_TRUE(up.ok());
        be->CopyToHostF32Async(up->t().ColSlice(cols / 2, cols / 2), half.as<float>());
        fence->Record();
        fence->Wait();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols / 2; ++c) {
            const float want = BF16ToF32(F32ToBF16(v[r * cols + cols / 2 + c]));
            ASSERT_EQ(half.as<float>()[r * (cols / 2) + c], want) << r << "," << c;
          }
        }
      }
    }
  }
}

// A two-block decoder-style stack in bf16 (RMSNorm, QKV GEMM, QK-norm + RoPE, GQA causal
// attention, o-proj with residual, SwiGLU MLP), over fixed buffers of kTokens rows.
constexpr int64_t kTokens = 96, kH = 256, kHeads = 4, kKv = 2, kDim = 64, kI = 512;
struct Stack {
  Backend* be = nullptr;
  std::vector<Buffer> keep;
  std::vector<std::unique_ptr<LinearWeight>> lin;
  Tensor x0, zeros, res, x, qkv, attn, gu, act, out, wn, qn, kn, inputs;
  Tensor T(DType dt, int64_t r, int64_t c) {
    keep.push_back(be->Allocate(dt, r, c));
    return keep.back().t();
  }
  Tensor Up(const std::vector<float>& v, int64_t r, int64_t c, DType dt) {
    HostTensor h{v.data(), DType::kF32, {r, c}, "t"};
    keep.push_back(std::move(be->Upload(h, dt)).value());
    return keep.back().t();
  }
  void Init(Backend* backend) {
    be = backend;
    const int64_t qkv_out = (kHeads + 2 * kKv) * kDim;
    uint32_t seed = 100;
    for (auto [o, i] :
         {std::pair<int64_t, int64_t>{qkv_out, kH}, {kH, kHeads * kDim}, {2 * kI, kH}, {kH, kI}}) {
      const auto w = Random(static_cast<size_t>(o * i), seed++, -0.08f, 0.08f);
      HostTensor h{w.data(), DType::kF32, {o, i}, "w"};
      lin.push_back(std::move(be->PrepareLinear(h, nullptr, DType::kBF16)).value());
    }
    x0 = Up(Random(kTokens * kH, seed++), kTokens, kH, DType::kF32);
    zeros = Up(std::vector<float>(kTokens * kH, 0.f), kTokens, kH, DType::kF32);
    wn = Up(Random(kH, seed++, 0.5f, 1.5f), 1, kH, DType::kF32);
    qn = Up(Random(kDim, seed++, 0.5f, 1.5f), 1, kDim, DType::kF32);
    kn = Up(Random(kDim, seed++, 0.5f, 1.5f), 1, kDim, DType::kF32);
    res = T(DType::kF32, kTokens, kH);
    x = T(DType::kBF16, kTokens, kH);
    qkv = T(DType::kBF16, kTokens, qkv_out);
    attn = T(DType::kBF16, kTokens, kHeads * kDim);
    gu = T(DType::kBF16, kTokens, 2 * kI);
    act = T(DType::kBF16, kTokens, kI);
    out = T(DType::kF32, kTokens, kH);
    inputs = T(DType::kI32, 1, 3 * kTokens + 1);  // positions, cu_seqlens, prefix_of
  }
  // Writes positions, cu_seqlens and prefix_of of a batch (sequence lengths; a shared
  // prefix of `prefix` tokens as sequence 0 when > 0); tokens past the batch get position 0.
  ReplayShape Write(const std::vector<int32_t>& lens, int prefix) {
    std::vector<int32_t> host(3 * kTokens + 1, 0);
    std::fill(host.begin() + 2 * kTokens + 1, host.end(), -1);
    int32_t t = 0, mx = 0;
    host[kTokens] = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      const int32_t start = s > 0 ? prefix : 0;
      for (int32_t i = 0; i < lens[s]; ++i) host[t + i] = start + i;
      t += lens[s];
      host[kTokens + s + 1] = t;
      if (prefix > 0 && s > 0) host[2 * kTokens + 1 + s] = 0;
      mx = std::max(mx, lens[s]);
    }
    // Capacity kTokens: the sequences after the batch's are empty (Model::PackInputs).
    std::fill(host.begin() + kTokens + 1 + static_cast<int64_t>(lens.size()),
              host.begin() + 2 * kTokens + 1, t);
    be->CopyFromHost(host.data(), inputs);
    return {static_cast<int>(lens.size()), mx};
  }
  // seq_capacity > 0: attention may be captured (AttentionParams::seq_capacity).
  void Forward(const ReplayShape& s, int seq_capacity = 0) {
    const int32_t* pos = inputs.ptr<int32_t>();
    const int32_t* cu = inputs.ptr<int32_t>() + kTokens;
    be->Add(x0, zeros, res);
    for (int block = 0; block < 2; ++block) {
      be->RmsNorm(res, nullptr, wn, 1e-6f, x);
      be->Linear({lin[0].get(), x, qkv});
      RopeParams rp;
      rp.positions = pos;
      rp.head_dim = rp.rotary_dim = kDim;
      rp.theta = 1e6;
      rp.max_position = kTokens;
      rp.x = qkv.ColSlice(0, kHeads * kDim);
      rp.num_heads = kHeads;
      be->QkNormRope(rp, qn, 1e-6f);
      rp.x = qkv.ColSlice(kHeads * kDim, kKv * kDim);
      rp.num_heads = kKv;
      be->QkNormRope(rp, kn, 1e-6f);
      AttentionParams ap = cuda_test::AttnParams(qkv, attn, cu, s.num_seqs, s.max_seqlen,
                                                 {kHeads, kKv, kDim, true, 0});
      ap.prefix_of = inputs.ptr<int32_t>() + 2 * kTokens + 1;
      ap.seq_capacity = seq_capacity;
      be->Attention(ap);
      be->Linear({lin[1].get(), attn, res, Activation::kNone, &res});
      be->RmsNorm(res, nullptr, wn, 1e-6f, x);
      be->Linear({lin[2].get(), x, gu});
      be->GatedActivate(gu, Activation::kSilu, act);
      be->Linear({lin[3].get(), act, res, Activation::kNone, &res});
    }
    be->RmsNorm(res, nullptr, wn, 1e-6f, out);
  }
  // The output rows of the batch's tokens.
  std::vector<float> Out(int64_t tokens) {
    std::vector<float> v(static_cast<size_t>(tokens * kH));
    be->CopyToHostF32(out.RowSlice(0, tokens), v.data());
    return v;
  }
};

bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Batches the Stack's recordings replay: sequence lengths, a shared prefix (sequence 0) of
// that many tokens when > 0, and the batch's token count.
struct ReplayCase {
  std::vector<int32_t> lens;
  int prefix;
  int64_t tokens;
};
std::vector<ReplayCase> ReplayCases() {
  return {{{kTokens}, 0, kTokens},
          {{40, 1, 30, 25}, 0, 96},
          {{7, 33}, 0, 40},            // padding rows after the batch
          {{12, 20, 5, 30}, 12, 67}};  // a shared prefix of 12 tokens
}

TEST(CudaExecution, RecordingReplaysBitForBit) {
  auto gpu = Cuda();
  REQUIRE_CUDA(gpu);
  Stack st;
  st.Init(gpu.get());
  // Warm-up (GEMM plans, RoPE tables) with the recording's own shape: one full sequence.
  const ReplayShape full = st.Write({kTokens}, 0);
  st.Forward(full);
  ASSERT_TRUE(gpu->BeginRecording().ok());
  EXPECT_EQ(gpu->BeginRecording().code(), StatusCode::kFailedPrecondition);
  st.Forward(full);
  auto rec = gpu->EndRecording();
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ((*rec)->attention_calls(), 2);
  EXPECT_EQ((*rec)->graph_segments(), 3);
  EXPECT_EQ(gpu->EndRecording().status().code(), StatusCode::kFailedPrecondition);

  const std::vector<ReplayCase> cases = ReplayCases();
  std::vector<std::vector<float>> replayed;
  for (const ReplayCase& c : cases) {
    const ReplayShape s = st.Write(c.lens, c.prefix);
    st.Forward(s);
    const auto eager = st.Out(c.tokens);
    st.Write(c.lens, c.prefix);
    gpu->Replay(**rec, s);
    const auto replay = st.Out(c.tokens);
    EXPECT_TRUE(Same(eager, replay)) << "max |diff| " << cuda_test::MaxAbs(eager, replay) << " for "
                                     << c.lens.size() << " sequences";
    for (float v : replay) ASSERT_TRUE(std::isfinite(v));
    replayed.push_back(replay);
  }
  // The sequence structure matters (the comparison is not between identical outputs).
  EXPECT_FALSE(Same(std::vector<float>(replayed[0].begin(), replayed[0].begin() + 40 * kH),
                    std::vector<float>(replayed[2].begin(), replayed[2].begin() + 40 * kH)));

  // Growing the backend's RoPE table afterwards (longer positions) keeps the table the
  // recording uses alive.
  {
    Tensor big = st.T(DType::kBF16, 4096, kHeads * kDim);
    std::vector<int32_t> pos(4096);
    for (int i = 0; i < 4096; ++i) pos[i] = i * 7;
    Tensor dpos = st.T(DType::kI32, 1, 4096);
    gpu->CopyFromHost(pos.data(), dpos);
    RopeParams rp;
    rp.x = big;
    rp.positions = dpos.ptr<int32_t>();
    rp.num_heads = kHeads;
    rp.head_dim = rp.rotary_dim = kDim;
    rp.theta = 1e6;
    rp.max_position = 4096 * 7;
    gpu->QkNormRope(rp, st.qn, 1e-6f);
    gpu->Synchronize();
  }
  const ReplayCase& c = cases[3];
  const ReplayShape s = st.Write(c.lens, c.prefix);
  gpu->Replay(**rec, s);
  EXPECT_TRUE(Same(st.Out(c.tokens), replayed[3]));
}

// With seq_capacity the tensor-core attention is captured in the recording (one graph,
// no eager step): every replay computes the batch it holds, bit for bit as the eager
// forward, including many short sequences (more query blocks than the fixed grid has
// blocks, so blocks loop), padding rows and a shared prefix.
TEST(CudaExecution, CapturedAttentionReplaysBitForBit) {
  auto gpu = Cuda();
  REQUIRE_CUDA(gpu);
  Stack st;
  st.Init(gpu.get());
  const ReplayShape full = st.Write({kTokens}, 0);
  st.Forward(full, kTokens);
  ASSERT_TRUE(gpu->BeginRecording().ok());
  st.Forward(full, kTokens);
  auto rec = gpu->EndRecording();
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ((*rec)->attention_calls(), 0);
  EXPECT_EQ((*rec)->graph_segments(), 1);
  std::vector<ReplayCase> cases = ReplayCases();
  cases.push_back({std::vector<int32_t>(24, 4), 0, 96});  // 24 query blocks, a grid of 4
  cases.push_back({std::vector<int32_t>(45, 2), 0, 90});
  for (const ReplayCase& c : cases) {
    const ReplayShape s = st.Write(c.lens, c.prefix);
    st.Forward(s);
    const auto eager = st.Out(c.tokens);
    // Stale results must not pass: the output buffers are overwritten first.
    st.Write({kTokens}, 0);
    st.Forward(full);
    st.Write(c.lens, c.prefix);
    gpu->Replay(**rec, s);
    const auto replay = st.Out(c.tokens);
    EXPECT_TRUE(Same(eager, replay)) << "max |diff| " << cuda_test::MaxAbs(eager, replay) << " for "
                                     << c.lens.size() << " sequences";
    for (float v : replay) ASSERT_TRUE(std::isfinite(v));
  }
}

// ---- The engine on CUDA ----

const std::string kFixtures = SLUICE_FIXTURES_DIR;

std::vector<TokenSequence> GoldenInputs(const std::string& name) {
  return testing::GoldenInputs(kFixtures, name);
}

std::unique_ptr<Engine> CudaEngine(const std::string& name, CudaGraphs graphs,
                                   int64_t budget = 8192, PrefixReuse prefix = PrefixReuse::kOff,
                                   DType dtype = DType::kF32) {
  EngineOptions o;
  o.model_dir = kFixtures + "/models/" + name;
  o.backend.device = DeviceKind::kCuda;
  o.dtype = dtype;
  o.max_batch_tokens = budget;
  o.cuda_graphs = graphs;
  o.prefix_reuse = prefix;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

double MaxDiff(const std::vector<PooledOutput>& a, const std::vector<PooledOutput>& b) {
  double m = 0;
  if (a.size() != b.size()) return INFINITY;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].values.size() != b[i].values.size()) return INFINITY;
    for (size_t k = 0; k < a[i].values.size(); ++k) {
      m = std::max(m, std::fabs(double(a[i].values[k]) - double(b[i].values[k])));
    }
  }
  return m;
}

bool SameOutputs(const std::vector<PooledOutput>& a, const std::vector<PooledOutput>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].values != b[i].values || a[i].raw != b[i].raw) return false;
  }
  return true;
}

// The golden inputs in turn, the last one cut, until they hold exactly `total` tokens.
std::vector<TokenSequence> FillBucket(const std::vector<TokenSequence>& golden, int64_t total) {
  std::vector<TokenSequence> in;
  int64_t t = 0;
  for (size_t i = 0; t < total; ++i) {
    TokenSequence s = golden[i % golden.size()];
    if (t + static_cast<int64_t>(s.ids.size()) > total) s.ids.resize(total - t);
    t += static_cast<int64_t>(s.ids.size());
    in.push_back(std::move(s));
  }
  return in;
}

// A batch that fills its bucket exactly runs the same kernels with and without the graph:
// bit-identical (MEAN pooling, so the eager forward computes every row too).
TEST(CudaEngineGraphs, ExactBucketIsBitIdenticalToEager) {
  if (!Cuda()) GTEST_SKIP() << "no CUDA device";
  auto on = CudaEngine("qwen3_pool_mean", CudaGraphs::kOn);
  auto off = CudaEngine("qwen3_pool_mean", CudaGraphs::kOff);
  ASSERT_NE(on, nullptr);
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(on->graph_buckets().empty());
  EXPECT_TRUE(off->graph_buckets().empty());
  const auto golden = GoldenInputs("qwen3_pool_mean");
  for (int64_t total : {16, 64, 192}) {
    const std::vector<TokenSequence> in = FillBucket(golden, total);
    const int64_t before = on->graph_batches();
    auto a = on->Run(in);
    auto b = off->Run(in);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(on->graph_batches(), before + 1) << total;
    EXPECT_TRUE(SameOutputs(*a, *b)) << total << " tokens: max |diff| " << MaxDiff(*a, *b);
  }
  EXPECT_EQ(off->graph_batches(), 0);
}

// bf16 with head_dim 64 (ModernBERT, local and global layers): the recorded forwards
// capture attention too (no eager attention step), and the graphs' results equal the eager
// forward's within f32 rounding where a batch fills its bucket (the eager forward of this
// CLS-pooled classifier runs its last layer's GEMMs over the pooled rows only, the graph
// over every row: different row counts, so possibly different GEMM algorithms; 6e-8 on an
// H100), within bf16 rounding otherwise. Bit-for-bit equality of the captured attention
// itself: CudaExecution.CapturedAttentionReplaysBitForBit.
TEST(CudaEngineGraphs, Bf16AttentionIsCapturedAndMatchesEager) {
  if (!Cuda()) GTEST_SKIP() << "no CUDA device";
  const std::string name = "modernbert_classifier_bf16";
  auto on = CudaEngine(name, CudaGraphs::kOn, 8192, PrefixReuse::kOff, DType::kBF16);
  auto off = CudaEngine(name, CudaGraphs::kOff, 8192, PrefixReuse::kOff, DType::kBF16);
  ASSERT_NE(on, nullptr);
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(on->graph_buckets().empty());
  EXPECT_EQ(on->graph_eager_attention_calls(), 0);
  const auto golden = GoldenInputs(name);
  for (int64_t total : {16, 64, 192}) {
    const std::vector<TokenSequence> in = FillBucket(golden, total);
    const int64_t before = on->graph_batches();
    auto a = on->Run(in);
    auto b = off->Run(in);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(on->graph_batches(), before + 1) << total;
    EXPECT_LE(MaxDiff(*a, *b), 1e-5) << total << " tokens";
  }
  auto a = on->Run(golden);
  auto b = off->Run(golden);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(MaxDiff(*a, *b), 2e-2);
}

// Padded batches (every pooling kind, shared prefixes, pipelined Run over many batches):
// graphs on vs off within 1e-5 in fp32; Run with two batches in flight equals the same
// batches run one by one, bit for bit.
TEST(CudaEngineGraphs, PaddedBatchesMatchEagerAndPipelineMatchesSerial) {
  if (!Cuda()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"qwen3_reranker", "bert_cross_encoder", "xlmr_st_mean",
                                 "bert_pool_all", "qwen3_pool_step", "qwen3_seqcls"}) {
    for (int64_t budget : {int64_t{150}, int64_t{8192}}) {
      const PrefixReuse prefix = name == "qwen3_reranker" ? PrefixReuse::kOn : PrefixReuse::kOff;
      auto on = CudaEngine(name, CudaGraphs::kOn, budget, prefix);
      auto off = CudaEngine(name, CudaGraphs::kOff, budget, prefix);
      ASSERT_NE(on, nullptr);
      ASSERT_NE(off, nullptr);
      auto inputs = GoldenInputs(name);
      if (prefix == PrefixReuse::kOn) {
        for (auto& in : inputs) in.ids.insert(in.ids.begin(), {3, 1, 4, 1, 5, 9, 2});
      }
      auto a = on->Run(inputs);
      auto b = off->Run(inputs);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      EXPECT_GT(on->graph_batches(), 0) << name;
      EXPECT_LE(MaxDiff(*a, *b), 1e-5) << name << " budget " << budget;
      if (prefix == PrefixReuse::kOn) {
        EXPECT_GT(on->prefix_reuse_stats().batches, 0);
      }
      // The same batches one at a time (RunBatch waits for each).
      for (Engine* e : {on.get(), off.get()}) {
        std::vector<PooledOutput> serial(inputs.size());
        std::vector<const TokenSequence*> group;
        size_t start = 0;
        int64_t tokens = 0;
        auto flush = [&] {
          if (group.empty()) return;
          ASSERT_TRUE(e->RunBatch(group, serial.data() + start).ok());
          start += group.size();
          group.clear();
          tokens = 0;
        };
        for (const auto& in : inputs) {
          if (!group.empty() && tokens + static_cast<int64_t>(in.ids.size()) > budget) flush();
          group.push_back(&in);
          tokens += static_cast<int64_t>(in.ids.size());
        }
        flush();
        EXPECT_TRUE(SameOutputs(serial, e == on.get() ? *a : *b))
            << name << " budget " << budget << (e == on.get() ? " graphs" : " eager");
      }
    }
  }
}

}  // namespace
}  // namespace sluice
