// Single-batch latency of the engine, with and without CUDA graphs, over a range of token
// counts: where graphs pay off (EngineOptions::cuda_graphs, docs/cuda.md).
//
//   build/release/latency_bench --model DIR [--device cuda] [--tokens 16,64,150,...]
//                               [--seq-len 140] [--prefix 40] [--reps 30]
//                               [--graph-max-tokens 8192] [--max-batch-tokens 65536]
//                               [--dtype bfloat16] [--task token-classify]
//                               [--residual-dtype f32|activation]
//   build/release/latency_bench --synthetic qwen3-0.6b [--dir /tmp/sluice-bench-models] ...
//
// For each token count n, two batch shapes: one sequence of n tokens, and n / seq-len
// sequences of seq-len tokens that share their first `prefix` tokens (a rerank request of
// several documents; the engine's shared-prefix reuse applies as it does for real
// requests). Each batch runs `reps` times through Engine::RunBatch (host packing, upload,
// forward, head, results back: what one request costs the engine) after 3 warm-up runs;
// the table gives the median and 95th percentile in milliseconds for eager launches and for
// graph replay, and their ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>

#include "core/dtype.h"
#include "engine/engine.h"
#include "models/registry.h"
#include "synthetic_model.h"

using namespace sluice;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> SplitInts(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(std::stoll(x));
  return out;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

struct Row {
  std::string shape;
  int64_t tokens;
  int seqs;
  double p50[2], p95[2];  // eager, graphs
};

}  // namespace

int main(int argc, char** argv) {
  std::string model, synthetic, dir = "/tmp/sluice-bench-models", device = "cuda";
  std::string tokens_list = "16,32,64,100,150,256,384,512,768,1024,1536,2048,2800,4096,6144,8192";
  int seq_len = 140, prefix = 40, reps = 30;
  int64_t graph_max = 8192, max_batch_tokens = 65536;
  std::optional<DType> dtype;
  std::optional<Task> task;
  bool activation_residual = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--synthetic")
      synthetic = v;
    else if (k == "--dir")
      dir = v;
    else if (k == "--device")
      device = v;
    else if (k == "--tokens")
      tokens_list = v;
    else if (k == "--seq-len")
      seq_len = std::stoi(v);
    else if (k == "--prefix")
      prefix = std::stoi(v);
    else if (k == "--reps")
      reps = std::stoi(v);
    else if (k == "--graph-max-tokens")
      graph_max = std::stoll(v);
    else if (k == "--max-batch-tokens")
      max_batch_tokens = std::stoll(v);
    else if (k == "--dtype") {
      DType d;
      if (!ParseDType(v, &d)) {
        std::fprintf(stderr, "--dtype: unknown dtype %s\n", v.c_str());
        return 2;
      }
      dtype = d;
    } else if (k == "--residual-dtype") {
      if (v != "f32" && v != "activation") {
        std::fprintf(stderr, "--residual-dtype: expected f32 or activation, got %s\n", v.c_str());
        return 2;
      }
      activation_residual = v == "activation";
    } else if (k == "--task") {
      Task t;
      if (!ParseTask(v, &t)) {
        std::fprintf(stderr, "--task: unknown task %s\n", v.c_str());
        return 2;
      }
      task = t;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (model.empty() && synthetic == "qwen3-0.6b") {
    model = bench::WriteModelDir(bench::Qwen3Reranker("qwen3-0.6b"), dir, true);
  }
  if (model.empty()) {
    std::fprintf(stderr, "give --model DIR or --synthetic qwen3-0.6b\n");
    return 2;
  }
  const std::vector<int64_t> counts = SplitInts(tokens_list);
  std::vector<Row> rows;
  const bool cpu = device == "cpu";  // no graphs on the CPU: the eager column only
  for (int mode = 0; mode < (cpu ? 1 : 2); ++mode) {
    EngineOptions o;
    o.model_dir = model;
    o.dtype = dtype;
    o.activation_residual = activation_residual;
    o.task = task;
    o.backend.device = device == "cpu" ? DeviceKind::kCpu : DeviceKind::kCuda;
    o.max_batch_tokens = max_batch_tokens;
    o.max_num_seqs = 1024;
    o.cuda_graphs = mode == 0 ? CudaGraphs::kOff : CudaGraphs::kOn;
    o.cuda_graph_max_tokens = graph_max;
    const double t0 = Now();
    auto engine = Engine::Load(o);
    if (!engine.ok()) {
      std::fprintf(stderr, "%s: %s\n", model.c_str(), engine.status().ToString().c_str());
      return 1;
    }
    Engine& e = **engine;
    std::printf("%s: loaded in %.2f s (%zu graph buckets)\n", mode ? "graphs" : "eager", Now() - t0,
                e.graph_buckets().size());
    const int vocab = e.model().config().vocab_size;
    const int max_len = e.info().max_sequence_length;
    std::mt19937 rng(11);
    std::vector<int32_t> shared(static_cast<size_t>(prefix));
    for (auto& t : shared) t = static_cast<int32_t>(rng() % vocab);
    size_t row = 0;
    for (int64_t n : counts) {
      for (int shape = 0; shape < 2; ++shape) {
        std::vector<TokenSequence> inputs;
        if (shape == 0) {
          if (n > max_len) continue;
          inputs.resize(1);
          for (int64_t t = 0; t < n; ++t)
            inputs[0].ids.push_back(static_cast<int32_t>(rng() % vocab));
        } else {
          const int64_t k = n / seq_len;
          if (k < 2) continue;
          inputs.resize(static_cast<size_t>(k));
          for (auto& in : inputs) {
            in.ids = shared;
            while (static_cast<int>(in.ids.size()) < seq_len) {
              in.ids.push_back(static_cast<int32_t>(rng() % vocab));
            }
          }
        }
        std::vector<const TokenSequence*> ptrs;
        int64_t total = 0;
        for (auto& in : inputs) {
          ptrs.push_back(&in);
          total += static_cast<int64_t>(in.ids.size());
        }
        std::vector<PooledOutput> outs(inputs.size());
        std::vector<double> ms;
        for (int r = 0; r < reps + 3; ++r) {
          const double a = Now();
          Status s = e.RunBatch(ptrs, outs.data());
          const double b = Now();
          if (!s.ok()) {
            std::fprintf(stderr, "%s\n", s.ToString().c_str());
            return 1;
          }
          if (r >= 3) ms.push_back((b - a) * 1e3);
        }
        if (mode == 0) {
          rows.push_back({shape == 0
                              ? "1 sequence"
                              : std::to_string(inputs.size()) + " x " + std::to_string(seq_len) +
                                    " (prefix " + std::to_string(prefix) + ")",
                          total,
                          static_cast<int>(inputs.size()),
                          {0, 0},
                          {0, 0}});
        }
        Row& r = rows[row++];
        r.p50[mode] = Quantile(ms, 0.5);
        r.p95[mode] = Quantile(ms, 0.95);
      }
    }
  }
  std::printf(
      "\n| batch | tokens | eager p50 / p95 ms | graphs p50 / p95 ms | eager / graphs (p50) "
      "|\n|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (cpu) {
      std::printf("| %s | %lld | %.3f / %.3f | - | - |\n", r.shape.c_str(),
                  static_cast<long long>(r.tokens), r.p50[0], r.p95[0]);
      continue;
    }
    std::printf("| %s | %lld | %.3f / %.3f | %.3f / %.3f | %.2fx |\n", r.shape.c_str(),
                static_cast<long long>(r.tokens), r.p50[0], r.p95[0], r.p50[1], r.p95[1],
                r.p50[0] / r.p50[1]);
  }
  return 0;
}
