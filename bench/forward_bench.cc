// Forward-pass throughput of sluice's engine on CPU for real model shapes (random
// weights), next to the GEMM peak measured by the same build on the same threads.
//
//   build/release/forward_bench [--models bert-base,minilm-l6,qwen3-0.6b]
//                               [--dtypes f32,bf16,int8] [--threads 2] [--seq-len 128]
//                               [--batch-tokens 8192] [--reps 3]
//                               [--dir /tmp/sluice-bench-models] [--write-only]
//                               [--amx-tune CHUNK:GROUP:L2KB]
//
// int8: the f32 directory loaded with --dtype int8 (int8 linear layers); its GEMM peak
// counts int8 multiply-adds as 2 ops. --write-only writes the f32 directories of --models,
// prints their paths and exits (for bench/cpu_dtype_score.py). --amx-tune sets the AMX
// GEMM's blocking (gemm_x86.h AmxTuning; the same bits, only the speed changes).
//
// Prints a markdown table: tokens/s (median of reps, min-max), achieved GFLOP/s and the
// fraction of the measured GEMM peak. FLOPs count the linear layers (2 per parameter per
// token) and attention (4 * context * width per token and layer; half for causal).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "backend/cpu/gemm_x86.h"
#include "engine/engine.h"
#include "synthetic_model.h"

using namespace sluice;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GEMM peak of this build: Linear on M=8192, K=1024, N=4096 (median of reps).
double GemmPeak(Backend* backend, DType dtype, int reps) {
  const int64_t M = 8192, K = 1024, N = 4096;
  std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(M * K));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 0.02f);
  for (auto& v : w) v = d(rng);
  for (auto& v : x) v = d(rng);
  HostTensor hw{w.data(), DType::kF32, {N, K}, "w"};
  auto lw = backend->PrepareLinear(hw, nullptr, dtype);
  if (!lw.ok()) return 0;
  Buffer bx = backend->Allocate(DType::kF32, M, K);
  Buffer by = backend->Allocate(DType::kF32, M, N);
  backend->CopyFromHost(x.data(), bx.t());
  std::vector<double> gf;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = Now();
    backend->Linear({lw->get(), bx.t(), by.t()});
    backend->Synchronize();
    const double el = Now() - t0;
    if (r > 0) gf.push_back(2.0 * M * N * K / el / 1e9);
  }
  return Median(gf);
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "bert-base,minilm-l6,qwen3-0.6b", dtypes = "f32,bf16";
  std::string dir = "/tmp/sluice-bench-models";
  int threads = 2, seq_len = 128, reps = 3;
  int64_t batch_tokens = 8192;
  bool profile = false, write_only = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--profile" || k == "--write-only") {
      (k == "--profile" ? profile : write_only) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "flag %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[i + 1];
    if (k == "--models")
      models = v;
    else if (k == "--dtypes")
      dtypes = v;
    else if (k == "--threads")
      threads = std::stoi(v);
    else if (k == "--seq-len")
      seq_len = std::stoi(v);
    else if (k == "--batch-tokens")
      batch_tokens = std::stoll(v);
    else if (k == "--reps")
      reps = std::stoi(v);
    else if (k == "--dir")
      dir = v;
    else if (k == "--amx-tune") {
      cpu::x86::AmxTuning t;
      if (!cpu::x86::ParseAmxTuning(v.c_str(), &t) || !t.epilogue) {
        std::fprintf(stderr, "--amx-tune: bad value %s (CHUNK:GROUP:L2KB)\n", v.c_str());
        return 2;
      }
      cpu::x86::SetAmxTuningForTesting(t);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  auto shape = [](const std::string& m, bench::ShapeSpec* spec, bool* causal) {
    *causal = false;
    if (m == "bert-base")
      *spec = bench::BertCrossEncoder("bert-base", 768, 12, 12, 3072);
    else if (m == "minilm-l6")
      *spec = bench::BertCrossEncoder("minilm-l6", 384, 6, 12, 1536);
    else if (m == "qwen3-0.6b")
      *spec = bench::Qwen3Reranker("qwen3-0.6b"), *causal = true;
    else
      return false;
    return true;
  };
  if (write_only) {
    for (const auto& m : Split(models)) {
      bench::ShapeSpec spec;
      bool causal;
      if (!shape(m, &spec, &causal)) {
        std::fprintf(stderr, "unknown model %s\n", m.c_str());
        return 2;
      }
      std::printf("%s %s\n", m.c_str(), bench::WriteModelDir(spec, dir, false).c_str());
    }
    return 0;
  }
  BackendOptions bo;
  bo.num_threads = threads;
  auto backend = CreateBackend(bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  std::printf("backend: %s\n", (*backend)->Describe().c_str());
  const bool want_i8 = dtypes.find("int8") != std::string::npos;
  double peak[3] = {GemmPeak(backend->get(), DType::kF32, reps),
                    GemmPeak(backend->get(), DType::kBF16, reps),
                    want_i8 ? GemmPeak(backend->get(), DType::kI8, reps) : 0.0};
  std::printf(
      "GEMM peak (8192x1024x4096, same build, %d threads): f32 %.1f GFLOP/s, bf16 %.1f "
      "GFLOP/s, int8 %.1f GOP/s\n\n",
      threads, peak[0], peak[1], peak[2]);
  backend->reset();

  std::printf(
      "| model | dtype | seqs x len | tokens/s (median) | min-max | GFLOP/s | %% of GEMM peak |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& m : Split(models)) {
    bench::ShapeSpec spec;
    bool causal = false;
    if (!shape(m, &spec, &causal)) {
      std::fprintf(stderr, "unknown model %s\n", m.c_str());
      return 2;
    }
    for (const auto& dt : Split(dtypes)) {
      if (dt != "f32" && dt != "bf16" && dt != "int8") {
        std::fprintf(stderr, "unknown dtype %s (f32, bf16, int8)\n", dt.c_str());
        return 2;
      }
      const bool bf16 = dt == "bf16", i8 = dt == "int8";
      const std::string path = bench::WriteModelDir(spec, dir, bf16);
      EngineOptions o;
      o.model_dir = path;
      if (i8) o.dtype = DType::kI8;
      o.backend.num_threads = threads;
      o.max_batch_tokens = batch_tokens;
      o.max_num_seqs = 1 << 20;
      o.profile = profile;
      auto engine = Engine::Load(o);
      if (!engine.ok()) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), engine.status().ToString().c_str());
        return 1;
      }
      const int nseq = static_cast<int>(batch_tokens / seq_len);
      std::vector<TokenSequence> inputs(nseq);
      std::mt19937 rng(5);
      const int vocab = (*engine)->model().config().vocab_size;
      for (auto& in : inputs) {
        for (int t = 0; t < seq_len; ++t) in.ids.push_back(static_cast<int32_t>(rng() % vocab));
      }
      std::vector<const TokenSequence*> ptrs;
      for (auto& in : inputs) ptrs.push_back(&in);
      std::vector<PooledOutput> outs(nseq);
      std::vector<double> tps;
      for (int r = 0; r < reps + 1; ++r) {
        const double t0 = Now();
        Status s = (*engine)->RunBatch(ptrs, outs.data());
        const double el = Now() - t0;
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        if (r > 0) tps.push_back(nseq * seq_len / el);  // first run warms up
        if (r == 0) (*engine)->ResetProfile();
      }
      const double attn = 4.0 * seq_len * spec.attn_width * spec.layers * (causal ? 0.5 : 1.0);
      const double flop_per_token = 2.0 * spec.linear_params + attn;
      const double med = Median(tps);
      const double gflops = med * flop_per_token / 1e9;
      std::printf("| %s | %s | %d x %d | %.0f | %.0f-%.0f | %.1f | %.0f%% |\n", m.c_str(),
                  dt.c_str(), nseq, seq_len, med, *std::min_element(tps.begin(), tps.end()),
                  *std::max_element(tps.begin(), tps.end()), gflops,
                  100.0 * gflops /
                      peak[i8     ? 2
                           : bf16 ? 1
                                  : 0]);
      if (profile) std::printf("\n%s\n", (*engine)->ProfileReport().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
