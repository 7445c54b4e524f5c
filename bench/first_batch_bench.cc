// What the first batch of each shape costs on a freshly loaded model (CPU), as a red-black
// switch leaves it to requests: loads --versions copies of one model in the same process
// one after the other (like successive versions of one architecture) and, on each, times
// the first forward of every --docs shape against the same forward repeated (median of
// --reps), with what the oneDNN linear layers spent creating primitives on that first call
// (cpu::LinearRunner::GetCacheStats).
//
//   build/release/first_batch_bench [--model models/demo-reranker] [--versions 3]
//       [--docs 8,64,128] [--query-tokens 8] [--doc-tokens 24] [--threads 1] [--reps 9]
//       [--keep 1] [--profile 0|1]
//
// A document is one rerank pair, [CLS] query [SEP] document [SEP] (the shape `sluice
// bench --documents N --doc-tokens 24 --query-tokens 8` sends), all of a request's pairs one
// batch. Prints one markdown row per version and shape.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "backend/cpu/buffer_pool.h"
#include "backend/cpu/cpu_linear.h"
#include "engine/engine.h"

using namespace sluice;

namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

std::vector<int> SplitInts(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(std::stoi(x));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "models/demo-reranker", docs_list = "8,64,128";
  int versions = 3, query_tokens = 8, doc_tokens = 24, threads = 1, reps = 9, profile = 0, keep = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") {
      model = v;
    } else if (k == "--versions") {
      versions = std::stoi(v);
    } else if (k == "--docs") {
      docs_list = v;
    } else if (k == "--query-tokens") {
      query_tokens = std::stoi(v);
    } else if (k == "--doc-tokens") {
      doc_tokens = std::stoi(v);
    } else if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--reps") {
      reps = std::stoi(v);
    } else if (k == "--keep") {  // earlier versions left loaded while a new one serves
      keep = std::stoi(v);
    } else if (k == "--profile") {  // 1: print the per-op times of each first and next call
      profile = std::stoi(v);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "flags take a value\n");
    return 2;
  }
  const std::vector<int> docs = SplitInts(docs_list);
  std::printf(
      "| version | docs | tokens | load ms | first ms | again ms (median) | extra ms | "
      "primitives created | pd ms | primitive ms | cache hits | page faults |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(5);
  // The --keep versions before the new one stay loaded while it serves its first batches
  // (a red-black switch: the old version drains, then unloads); older ones are unloaded.
  std::vector<std::unique_ptr<Engine>> loaded;
  for (int ver = 0; ver < versions; ++ver) {
    EngineOptions o;
    o.model_dir = model;
    o.backend.device = DeviceKind::kCpu;
    o.backend.num_threads = threads;
    o.profile = profile != 0;
    const double t0 = NowMs();
    auto engine = Engine::Load(o);
    if (!engine.ok()) {
      std::fprintf(stderr, "%s: %s\n", model.c_str(), engine.status().ToString().c_str());
      return 1;
    }
    const double load_ms = NowMs() - t0;
    while (static_cast<int>(loaded.size()) > keep) loaded.erase(loaded.begin());
    loaded.push_back(std::move(*engine));
    Engine& e = *loaded.back();
    const int vocab = e.model().config().vocab_size;
    for (int n : docs) {
      std::vector<TokenSequence> inputs(static_cast<size_t>(n));
      for (auto& in : inputs) {
        in.ids.push_back(1);
        for (int t = 0; t < query_tokens; ++t) in.ids.push_back(5 + rng() % (vocab - 5));
        in.ids.push_back(2);
        in.type_ids.assign(in.ids.size(), 0);
        for (int t = 0; t < doc_tokens; ++t) in.ids.push_back(5 + rng() % (vocab - 5));
        in.ids.push_back(2);
        in.type_ids.resize(in.ids.size(), 1);
      }
      std::vector<const TokenSequence*> ptrs;
      int64_t tokens = 0;
      for (auto& in : inputs) {
        ptrs.push_back(&in);
        tokens += static_cast<int64_t>(in.ids.size());
      }
      std::vector<PooledOutput> outs(inputs.size());
      e.ResetProfile();
      const auto before = cpu::LinearRunner::GetCacheStats();
      const int64_t faults0 = MinorFaults();
      double a = NowMs();
      if (Status s = e.RunBatch(ptrs, outs.data()); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      const double first = NowMs() - a;
      const int64_t faults = MinorFaults() - faults0;
      const auto after = cpu::LinearRunner::GetCacheStats();
      std::string first_profile = e.ProfileReport();
      e.ResetProfile();
      std::vector<double> again;
      for (int r = 0; r < reps; ++r) {
        a = NowMs();
        if (Status s = e.RunBatch(ptrs, outs.data()); !s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        again.push_back(NowMs() - a);
        if (r == 0 && profile) {
          std::printf("version %d, %d docs, first call:\n%s\nsecond call:\n%s\n", ver + 1, n,
                      first_profile.c_str(), e.ProfileReport().c_str());
        }
      }
      std::sort(again.begin(), again.end());
      const double med = again[again.size() / 2];
      std::printf(
          "| %d | %d | %lld | %.1f | %.2f | %.2f | %.2f | %lld | %.2f | %.2f | %lld | %lld |\n",
          ver + 1, n, static_cast<long long>(tokens), load_ms, first, med, first - med,
          static_cast<long long>(after.created - before.created), after.pd_ms - before.pd_ms,
          after.prim_ms - before.prim_ms, static_cast<long long>(after.hits - before.hits),
          static_cast<long long>(faults));
    }
  }
  const auto st = cpu::LinearRunner::GetCacheStats();
  std::printf("\nprocess: %lld primitives created, %lld lookups hit\n",
              static_cast<long long>(st.created), static_cast<long long>(st.hits));
  const auto pool = cpu::BufferPool::GetStats();
  std::printf("buffer pool: %lld reused, %lld allocated, %lld held (%.1f MiB)\n",
              static_cast<long long>(pool.reused), static_cast<long long>(pool.allocated),
              static_cast<long long>(pool.held), static_cast<double>(pool.held_bytes) / (1 << 20));
  return 0;
}
