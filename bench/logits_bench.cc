// Per-step cost of batch-level logits processors (docs/plugins.md, docs/benchmarks.md) with
// the fsm_logits example plugin: for each batch size, `steps` engine-like steps of B rows,
// each row a request with its own FSM (a recommendation-style rule: one of 200 item-start
// tokens, then one of 50 item tokens, then a separator, again), each step appending one
// allowed token per row, then update_state and the masks on the thread pool, exactly as the
// generation engine calls them (LogitsRows::Flush, FillLogitsMasks). Prints the median and
// p90 per step, per row, and the growth from 16 to 256 rows.
//
//   build/release/logits_bench [--plugin build/release/plugins/fsm_logits.so]
//       [--vocab 151936] [--threads 0 (= hardware threads, at most 16)] [--batches 1,16,64,256]
//       [--steps 200]
//
// For the step-time fraction inside `sluice generate` on a GPU: --write DIR writes a
// Qwen3-0.6B-shaped random-weight model (DIR/qwen3-0.6b-bf16) and two prompt files of
// --batch requests (DIR/prompts_fsm.jsonl naming the fsm processor, DIR/prompts_plain.jsonl
// without it); `sluice generate --plugin ... --input DIR/prompts_fsm.jsonl` then prints the
// processors' time per step and its share of the step (docs/benchmarks.md has the command).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "core/thread_pool.h"
#include "engine/logits_processor.h"
#include "engine/plugins.h"
#include "synthetic_model.h"

using namespace sluice;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A request's FSM over token ids, as the fsm_logits plugin reads it from extra_args.
std::string RecommendationFsm(std::mt19937& rng, int vocab) {
  auto tokens = [&](int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(rng() % (vocab - 1));
    return s + "]";
  };
  return R"({"fsm": {"start": 0, "states": [{"allow": )" + tokens(200) +
         R"(, "else": 1}, {"allow": )" + tokens(50) + R"(, "else": 2}, {"allow": [)" +
         std::to_string(vocab - 1) + R"(], "else": 0}]}})";
}

struct Seq {
  LpSlot slot;
  std::vector<int32_t> prompt, output;
  sluice_token_view view{};
  sluice_request_params params{};
  std::string id, extra;
};

int Usage() {
  std::fprintf(stderr,
               "usage: logits_bench [--plugin PATH] [--vocab V] [--threads T] [--batches "
               "1,16,64,256] [--steps N] | --write DIR [--batch 256] [--plugin PATH]\n");
  return 2;
}

int WriteGpuInputs(const std::string& dir, int batch, int vocab) {
  const std::string model = bench::WriteModelDir(
      bench::Qwen3Reranker("qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, vocab), dir, /*bf16=*/true);
  std::filesystem::remove(model + "/sluice.json");  // a plain causal LM (task generate)
  std::mt19937 rng(7);
  std::ofstream fsm(dir + "/prompts_fsm.jsonl"), plain(dir + "/prompts_plain.jsonl");
  for (int r = 0; r < batch; ++r) {
    std::string ids = "[";
    for (int i = 0; i < 128; ++i) ids += (i ? "," : "") + std::to_string(rng() % 100000);
    ids += "]";
    const std::string common = R"({"prompt_token_ids": )" + ids +
                               R"(, "max_tokens": 128, "temperature": 0.8, "seed": )" +
                               std::to_string(r) + R"(, "ignore_eos": true, "detokenize": false)";
    plain << common << "}\n";
    fsm << common << R"(, "logits_processors": ["fsm"], "extra_args": )"
        << RecommendationFsm(rng, vocab) << "}\n";
  }
  std::printf("model %s\nprompts %s/prompts_fsm.jsonl, %s/prompts_plain.jsonl (%d each)\n",
              model.c_str(), dir.c_str(), dir.c_str(), batch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin = "build/release/plugins/fsm_logits.so", write_dir;
  int vocab = 151936, threads = 0, steps = 200, batch = 256;
  std::vector<int> batches = {1, 16, 64, 256};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const std::string v = argv[++i];
    if (a == "--plugin") {
      plugin = v;
    } else if (a == "--vocab") {
      vocab = std::stoi(v);
    } else if (a == "--threads") {
      threads = std::stoi(v);
    } else if (a == "--steps") {
      steps = std::stoi(v);
    } else if (a == "--write") {
      write_dir = v;
    } else if (a == "--batch") {
      batch = std::stoi(v);
    } else if (a == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      std::string x;
      while (std::getline(ss, x, ',')) batches.push_back(std::stoi(x));
    } else {
      return Usage();
    }
  }
  if (!write_dir.empty()) return WriteGpuInputs(write_dir, batch, vocab);
  auto set = LoadPlugins({plugin});
  if (!set.ok()) {
    std::fprintf(stderr, "%s\n", set.status().ToString().c_str());
    return 1;
  }
  const LogitsProcessorFactory* f = (*set)->Find("fsm");
  if (f == nullptr) {
    std::fprintf(stderr, "%s registers no \"fsm\" processor\n", plugin.c_str());
    return 1;
  }
  if (threads <= 0) threads = std::min(16, ThreadPool::HardwareThreads());
  ThreadPool pool(threads, /*spin_us=*/20);  // as the generation engine makes it
  const int words = (vocab + 31) / 32;
  std::printf("fsm_logits, vocab %d, %d threads, %d steps per batch size\n", vocab, threads, steps);
  std::printf(
      "| rows | per step median (us) | p90 (us) | per row (us) | of which update_state (us) | "
      "sparse rows |\n");
  std::printf("|---|---|---|---|---|---|\n");
  double at16 = 0, at256 = 0;
  for (int B : batches) {
    auto proc = f->Create(vocab, B);
    if (!proc.ok()) {
      std::fprintf(stderr, "%s\n", proc.status().ToString().c_str());
      return 1;
    }
    std::vector<std::unique_ptr<LogitsProcessor>> procs;
    procs.push_back(std::move(proc).value());
    LogitsRows rows(procs[0].get(), B);
    std::mt19937 rng(11);
    std::vector<std::unique_ptr<Seq>> seqs;
    for (int r = 0; r < B; ++r) {
      auto s = std::make_unique<Seq>();
      s->id = "r" + std::to_string(r);
      s->extra = RecommendationFsm(rng, vocab);
      s->prompt.assign(128, 1);
      s->output.reserve(static_cast<size_t>(steps) + 1);
      s->params.struct_size = sizeof s->params;
      s->params.request_id = s->id.c_str();
      s->params.extra_args = s->extra.c_str();
      s->params.extra_args_len = s->extra.size();
      s->params.n = 1;
      s->params.temperature = 0.8f;
      s->params.vocab_size = vocab;
      if (!f->Validate(s->params).ok()) return 1;
      s->slot.proc = 0;
      s->slot.info.c.params = &s->params;
      s->slot.info.c.prompt = {s->prompt.data(), static_cast<int64_t>(s->prompt.size())};
      s->slot.info.c.output = &s->view;
      rows.Add(&s->slot);
      seqs.push_back(std::move(s));
    }
    std::vector<uint32_t> masks(static_cast<size_t>(B) * words);
    std::vector<int32_t> allowed(static_cast<size_t>(B) * words);
    LpMaskOut out;
    out.masks = masks.data();
    out.allowed = allowed.data();
    int sparse_rows = 0;
    std::vector<LpMaskJob> jobs;
    std::vector<LpMaskGroup> groups;
    std::vector<double> step_us, update_us;
    for (int step = 0; step < steps + 5; ++step) {
      // The tokens the previous step "sampled": the first allowed one of each row's mask.
      if (step > 0) {
        for (int r = 0; r < B; ++r) {
          const LpMaskGroup& g = groups[static_cast<size_t>(r)];
          Seq& s = *static_cast<Seq*>(g.owner);
          int32_t t = 0;
          if (g.allowed_begin >= 0) {  // a sparse list (ABI 1.3): its lowest id
            t = *std::min_element(allowed.begin() + g.allowed_begin,
                                  allowed.begin() + g.allowed_end);
          } else {
            const uint32_t* m = masks.data() + static_cast<size_t>(g.mask) * words;
            for (int w = 0; w < words; ++w) {
              if (m[w]) {
                t = w * 32 + __builtin_ctz(m[w]);
                break;
              }
            }
          }
          s.output.push_back(t);
          s.view = {s.output.data(), static_cast<int64_t>(s.output.size())};
        }
      }
      const double t0 = Now();
      rows.Flush({});
      const double t1 = Now();
      jobs.clear();
      groups.clear();
      for (auto& s : seqs) {
        groups.push_back({s.get(), static_cast<int>(jobs.size()), static_cast<int>(jobs.size()) + 1,
                          Status::Ok()});
        jobs.push_back({0, s->slot.row});
      }
      FillLogitsMasks(pool, procs, jobs, &groups, vocab, &out);
      const double t2 = Now();
      for (const LpMaskGroup& g : groups) {
        if (!g.error.ok()) {
          std::fprintf(stderr, "step %d: %s\n", step, g.error.ToString().c_str());
          return 1;
        }
      }
      for (const LpMaskGroup& g : groups) sparse_rows += g.allowed_begin >= 0;
      if (step >= 5) {  // warm-up
        step_us.push_back(1e6 * (t2 - t0));
        update_us.push_back(1e6 * (t1 - t0));
      }
    }
    std::sort(step_us.begin(), step_us.end());
    std::sort(update_us.begin(), update_us.end());
    const double med = step_us[step_us.size() / 2], p90 = step_us[step_us.size() * 9 / 10];
    std::printf("| %d | %.1f | %.1f | %.2f | %.1f | %.0f%% |\n", B, med, p90, med / B,
                update_us[update_us.size() / 2],
                100.0 * sparse_rows / (static_cast<double>(B) * (steps + 5)));
    if (B == 16) at16 = med;
    if (B == 256) at256 = med;
  }
  if (at16 > 0 && at256 > 0) {
    std::printf("growth 16 -> 256 rows: %.2fx (target <= 2x on 16 threads)\n", at256 / at16);
  }
  return 0;
}
