// Logits processors in the generation engine under a randomized scheduler torture: requests
// arrive at random steps, with random chunk budgets, a KV cache small enough to force
// preemptions, random cancellations and n > 1. Every processor the engine creates is wrapped
// by a checker that replays its updates and, at every step, compares its view of each row
// (which request and completion, prompt, output so far) with the engine's true history, and
// the mask the processor fills with the mask that history implies — for the built-in
// structured-output processor and the fsm_logits example plugin (loaded with dlopen). Also:
// a failing processor fails only its request, an argmax-invariant processor is skipped for
// greedy rows, and the admission errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "../generation/gen_util.h"
#include "engine/plugins.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

const std::string kPluginDir = SLUICE_PLUGIN_DIR;
std::string DemoChat() { return std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-chat"; }

// The test's own FSM (the example's semantics, written again).
struct TestFsm {
  struct State {
    std::set<int32_t> allow;  // empty: any
    std::map<int32_t, int32_t> next;
    int32_t other = -1;
  };
  std::vector<State> states;
  std::string Json() const {
    std::string s = R"({"fsm": {"start": 0, "states": [)";
    for (size_t i = 0; i < states.size(); ++i) {
      const State& st = states[i];
      s += i ? ",{" : "{";
      std::string parts;
      if (!st.allow.empty()) {
        parts += "\"allow\": [";
        bool first = true;
        for (int32_t t : st.allow) parts += (first ? "" : ",") + std::to_string(t), first = false;
        parts += "]";
      }
      if (!st.next.empty()) {
        parts += std::string(parts.empty() ? "" : ",") + "\"next\": {";
        bool first = true;
        for (auto [t, to] : st.next) {
          parts += (first ? "\"" : ",\"") + std::to_string(t) + "\": " + std::to_string(to);
          first = false;
        }
        parts += "}";
      }
      if (st.other >= 0) {
        parts += std::string(parts.empty() ? "" : ",") + "\"else\": " + std::to_string(st.other);
      }
      s += parts + "}";
    }
    return s + "]}}";
  }
  // The state after `tokens` (-1 if a token was not allowed).
  int32_t Run(const std::vector<int32_t>& tokens) const {
    int32_t s = 0;
    for (int32_t t : tokens) {
      const State& st = states[s];
      if (!st.allow.empty() && !st.allow.count(t)) return -1;
      auto it = st.next.find(t);
      s = it != st.next.end() ? it->second : (st.other >= 0 ? st.other : s);
    }
    return s;
  }
};

// The truth the checker compares with: requests by id, and what their FSM is.
struct Truth {
  std::map<std::string, std::shared_ptr<GenerateRequest>> requests;
  std::map<std::string, TestFsm> fsms;
  int vocab = 0;
};

struct CheckStats {
  std::mutex mu;
  int64_t updates = 0, added = 0, resets = 0, removed = 0, moved = 0, partial = 0, fills = 0;
  int64_t sparse_fills = 0;  // of fills: sparse lists (ABI 1.3 fill_allowed)
  int64_t failures = 0;
  std::string first_failure;
  void Fail(const std::string& m) {
    std::lock_guard<std::mutex> l(mu);
    if (failures++ == 0) first_failure = m;
  }
};

// Wraps a processor; checks its view against the truth at every update and fill.
class Checker final : public LogitsProcessor {
 public:
  Checker(std::unique_ptr<LogitsProcessor> inner, const Truth* truth, CheckStats* stats)
      : inner_(std::move(inner)), truth_(truth), stats_(stats) {}
  const std::string& name() const override { return inner_->name(); }
  bool argmax_invariant() const override { return inner_->argmax_invariant(); }

  void UpdateState(const LpUpdate& u) override {
    ++stats_->updates;
    for (int32_t r : u.removed) {
      if (r < 0 || r >= static_cast<int32_t>(rows_.size()) || !rows_[r].req) {
        return stats_->Fail(name() + ": removed row " + std::to_string(r) + " not in use");
      }
      rows_[r] = Row{};
      ++stats_->removed;
    }
    if (rows_.size() < static_cast<size_t>(u.batch_size)) rows_.resize(u.batch_size);
    for (const LpAddedRow& a : u.added) {
      if (rows_.size() <= static_cast<size_t>(a.c.row)) rows_.resize(a.c.row + 1);
      Row& row = rows_[a.c.row];
      if (row.req) return stats_->Fail(name() + ": added into row in use");
      auto it = truth_->requests.find(a.c.params->request_id);
      if (it == truth_->requests.end()) return stats_->Fail("added an unknown request");
      row.req = it->second.get();
      row.index = a.c.params->index;
      row.id = it->first;
      row.output = a.c.output;
      const std::pair<std::string, int> key{row.id, row.index};
      const bool again = seen_.count(key) > 0;
      seen_.insert(key);
      if (again != ((a.c.flags & SLUICE_ROW_RESET) != 0)) {
        return stats_->Fail(name() + ": reset flag " + std::to_string(a.c.flags) + " for " +
                            row.id + (again ? " seen before" : " never seen"));
      }
      stats_->resets += again;
      ++stats_->added;
      const std::vector<int32_t> prompt(a.c.prompt.ids, a.c.prompt.ids + a.c.prompt.size);
      if (prompt != row.req->prompt) return stats_->Fail(name() + ": prompt differs");
      if (a.c.params->n != row.req->params.n || row.index >= row.req->params.n) {
        return stats_->Fail(name() + ": n / index wrong");
      }
    }
    for (const sluice_moved_row& m : u.moved) {
      if (!rows_[m.from].req || rows_[m.to].req) return stats_->Fail("bad move");
      rows_[m.to] = rows_[m.from];
      rows_[m.from] = Row{};
      ++stats_->moved;
    }
    for (size_t r = static_cast<size_t>(u.batch_size); r < rows_.size(); ++r) {
      if (rows_[r].req) return stats_->Fail("a row in use past batch_size");
    }
    rows_.resize(u.batch_size);
    std::set<std::pair<std::string, int>> live;
    for (Row& row : rows_) {
      if (!row.req) return stats_->Fail("a hole below batch_size");
      if (!live.insert({row.id, row.index}).second) return stats_->Fail("a sequence in two rows");
      // The live view is the true history.
      const std::vector<int32_t>& truth = row.req->outputs[row.index].token_ids;
      if (std::vector<int32_t>(row.output->ids, row.output->ids + row.output->size) != truth) {
        return stats_->Fail(name() + ": output view of " + row.id + " differs from its history");
      }
      row.partial = false;
    }
    for (int32_t r : u.partial) {
      rows_[r].partial = true;
      rows_[r].partial_len = rows_[r].output->size;
      ++stats_->partial;
    }
    inner_->UpdateState(u);
  }

  Status FillMask(int32_t r, uint32_t* mask) override {
    const Row* row = Fillable(r);
    if (row == nullptr) return Status::Ok();
    Status st = inner_->FillMask(r, mask);
    if (!st.ok()) return st;
    if (Want(*row) != std::vector<uint32_t>(mask, mask + Words())) {
      stats_->Fail(name() + ": mask of " + row->id + " differs from its history's");
    }
    std::lock_guard<std::mutex> l(stats_->mu);
    ++stats_->fills;
    return Status::Ok();
  }

  bool has_allowed() const override { return inner_->has_allowed(); }
  // The list, when the processor gives one, must be the history's allowed set (duplicates
  // fine); no list only for a state that allows every token (the FSMs here allow <= 6).
  Status FillAllowed(int32_t r, int32_t* ids, int32_t capacity, int32_t* count) override {
    const Row* row = Fillable(r);
    if (row == nullptr) return Status::Ok();
    Status st = inner_->FillAllowed(r, ids, capacity, count);
    if (!st.ok()) return st;
    const std::vector<uint32_t> want = Want(*row);
    if (*count < 0 || *count > capacity) {
      if (std::any_of(want.begin(), want.end() - 1, [](uint32_t w) { return w != ~0u; })) {
        stats_->Fail(name() + ": no list for " + row->id + " whose state allows few tokens");
      }
      return Status::Ok();
    }
    std::vector<uint32_t> got(want.size(), 0u);
    for (int32_t i = 0; i < *count; ++i) got[ids[i] / 32] |= 1u << (ids[i] % 32);
    if (got != want) stats_->Fail(name() + ": list of " + row->id + " differs from its history's");
    std::lock_guard<std::mutex> l(stats_->mu);
    ++stats_->fills;
    ++stats_->sparse_fills;
    return Status::Ok();
  }

 private:
  struct Row {
    GenerateRequest* req = nullptr;
    std::string id;
    int index = 0;
    const sluice_token_view* output = nullptr;
    bool partial = false;
    int64_t partial_len = 0;
  };
  int Words() const { return (truth_->vocab + 31) / 32; }
  // The row asked for, checked (in range, not in partial prefill); nullptr if out of range.
  const Row* Fillable(int32_t r) {
    if (r < 0 || r >= static_cast<int32_t>(rows_.size())) {
      stats_->Fail("fill of a row out of range");
      return nullptr;
    }
    if (rows_[r].partial) stats_->Fail(name() + ": a row in partial prefill was sampled");
    return &rows_[r];
  }
  // The mask the row's true history implies.
  std::vector<uint32_t> Want(const Row& row) const {
    const int words = Words();
    std::vector<uint32_t> want(static_cast<size_t>(words), ~0u);
    if (truth_->vocab % 32) want[words - 1] = (1u << (truth_->vocab % 32)) - 1u;
    const std::vector<int32_t>& hist = row.req->outputs[row.index].token_ids;
    if (name() == "fsm") {
      const TestFsm& f = truth_->fsms.at(row.id);
      const int32_t s = f.Run(hist);
      if (s < 0) {
        stats_->Fail("fsm: the history breaks the FSM");
      } else if (!f.states[s].allow.empty()) {
        std::fill(want.begin(), want.end(), 0u);
        for (int32_t t : f.states[s].allow) want[t / 32] |= 1u << (t % 32);
      }
    } else {
      structured::Grammar& g = *row.req->params.grammar;
      int32_t s = g.start();
      for (int32_t t : hist) {
        if (!g.trie().IsEos(t)) s = g.Advance(s, t);
      }
      if (s < 0 || !g.FillMask(s, want.data()).ok()) stats_->Fail("structured: dead history");
    }
    return want;
  }
  std::unique_ptr<LogitsProcessor> inner_;
  const Truth* truth_;
  CheckStats* stats_;
  std::vector<Row> rows_;
  std::set<std::pair<std::string, int>> seen_;
};

TestFsm RandomFsm(std::mt19937& rng, int vocab, bool any_only) {
  TestFsm f;
  const int n = 2 + static_cast<int>(rng() % 3);
  f.states.resize(n);
  for (int s = 0; s < n; ++s) {
    TestFsm::State& st = f.states[s];
    if (!any_only && rng() % 4 != 0) {
      const int k = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < k; ++i) st.allow.insert(static_cast<int32_t>(rng() % vocab));
    }
    std::vector<int32_t> from(st.allow.begin(), st.allow.end());
    if (from.empty()) {
      for (int i = 0; i < 3; ++i) from.push_back(static_cast<int32_t>(rng() % vocab));
    }
    for (int32_t t : from) {
      if (rng() % 2) st.next[t] = static_cast<int32_t>(rng() % n);
    }
    if (rng() % 2) st.other = static_cast<int32_t>(rng() % n);
  }
  return f;
}

int64_t KvBlockBytes(const std::shared_ptr<const ModelBundle>& b) {
  const ModelConfig& c = b->config;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  return KvCache::BlockBytes(c.num_hidden_layers, kv_dim, DType::kF32);
}

TEST(LogitsProcessorTorture, EveryViewIsTheTrueHistory) {
  auto plugins = LoadPlugins({kPluginDir + "/fsm_logits.so"});
  ASSERT_TRUE(plugins.ok()) << plugins.status().ToString();
  CheckStats stats;
  int64_t preemptions = 0, cancelled = 0, forks = 0, finished = 0, fsm_checked = 0;
  int64_t json_checked = 0;
  const int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    std::mt19937 rng(1234 + round);
    Truth truth;
    auto bundle = LoadModelBundle(DemoChat());
    ASSERT_TRUE(bundle.ok());
    GenerationOptions o;
    o.backend.device = testing::TestDevice();
    o.backend.num_threads = 2;
    const int64_t budgets[] = {16, 29, 64};
    o.max_num_batched_tokens = budgets[round];
    o.max_num_seqs = 6 + 2 * round;
    // Small (14 to 22 blocks of 16 tokens; one sequence needs up to 10): forces preemptions.
    o.kv_cache_memory = KvBlockBytes(*bundle) * (15 + 4 * round);
    o.max_model_len = 160;
    o.plugins = *plugins;
    o.logits_threads = 3;
    o.wrap_processor = [&](std::unique_ptr<LogitsProcessor> p) -> std::unique_ptr<LogitsProcessor> {
      return std::make_unique<Checker>(std::move(p), &truth, &stats);
    };
    auto gen = Generator::Load(*bundle, o);
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    Generator& g = **gen;
    truth.vocab = g.limits().vocab_size;
    const Tokenizer& tok = *g.bundle().tokenizer;
    structured::ConstraintSpec regex;
    regex.kind = structured::ConstraintSpec::Kind::kRegex;
    regex.field = "guided_regex";
    regex.text = "(salmon|bees|owls) (swim|fly|sing) [0-9]{1,4}( and [a-z]{2,6})*";
    auto gr = g.CompileConstraint(regex);
    ASSERT_TRUE(gr.ok());

    std::vector<std::shared_ptr<GenerateRequest>> all;
    int next_id = 0;
    auto add = [&] {
      auto r = std::make_shared<GenerateRequest>();
      r->id = "r" + std::to_string(round) + "-" + std::to_string(next_id++);
      const int kind = static_cast<int>(rng() % 4);  // 0 fsm, 1 structured, 2 both, 3 none
      const int plen = 3 + static_cast<int>(rng() % 70);
      if (kind == 1 || kind == 2) {
        auto enc = tok.Encode("<|im_start|>user\nName an animal<|im_end|>\n", false);
        r->prompt = enc->ids;
        for (int i = 0; i < plen / 4; ++i) r->prompt.push_back(static_cast<int32_t>(rng() % 900));
      } else {
        for (int i = 0; i < plen; ++i) r->prompt.push_back(static_cast<int32_t>(rng() % 1000));
      }
      SamplingParams& p = r->params;
      p.n = 1 + static_cast<int>(rng() % 3);
      p.temperature = rng() % 3 == 0 ? 0.f : 0.9f;
      p.seed = rng();
      p.max_tokens = 4 + static_cast<int>(rng() % 20);
      if (kind == 0 || kind == 2) {
        TestFsm f = RandomFsm(rng, truth.vocab, kind == 2);
        p.logits_processors = {"fsm"};
        p.extra_args = f.Json();
        p.ignore_eos = true;  // an FSM may forbid eos
        truth.fsms[r->id] = f;
      }
      if (kind == 1 || kind == 2) {
        p.constraint = regex;
        p.ignore_eos = false;
      }
      truth.requests[r->id] = r;
      Status st = g.Add(r);
      ASSERT_TRUE(st.ok()) << st.ToString();
      forks += p.n > 1;
      all.push_back(r);
    };
    const int total = 22;
    int steps = 0;
    while (next_id < total || g.HasWork()) {
      const int arrivals = next_id < total ? static_cast<int>(rng() % 3) : 0;
      for (int i = 0; i < arrivals && next_id < total; ++i) add();
      if (!all.empty() && rng() % 23 == 0) {  // a cancellation
        auto& r = all[rng() % all.size()];
        if (!r->done) {
          r->cancelled = true;
          ++cancelled;
        }
      }
      ASSERT_TRUE(g.Step().ok());
      ASSERT_EQ(stats.failures, 0) << stats.first_failure;
      ASSERT_LT(++steps, 20000);
    }
    preemptions += g.stats().preemptions;
    for (const auto& r : all) {
      ASSERT_TRUE(r->done);
      for (const CompletionOutput& out : r->outputs) {
        if (out.finish_reason == "abort") continue;
        ++finished;
        if (truth.fsms.count(r->id)) {
          EXPECT_GE(truth.fsms[r->id].Run(out.token_ids), 0) << r->id;
          ++fsm_checked;
        }
        if (r->params.constraint && out.finish_reason == "stop") {
          EXPECT_TRUE((*gr)->Matches(out.text)) << out.text;
          ++json_checked;
        }
      }
    }
  }
  EXPECT_EQ(stats.failures, 0) << stats.first_failure;
  // The run exercised what it claims to.
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(stats.resets, 0);
  EXPECT_GT(stats.partial, 0);
  EXPECT_GT(stats.moved, 0);
  EXPECT_GT(stats.removed, 0);
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(forks, 0);
  EXPECT_GT(stats.fills, 500);
  EXPECT_GT(stats.sparse_fills, 100);                // fsm-only rows: lists
  EXPECT_GT(stats.fills - stats.sparse_fills, 100);  // fsm + structured rows: bitmasks
  EXPECT_GT(fsm_checked, 20);
  EXPECT_GT(json_checked, 3);
  EXPECT_GT(finished, 40);
}

// Test processors registered through the C ABI: "flaky" fails the rows whose extra_args ask
// for it, from their second token; "counting" (argmax-invariant) counts its fills.
struct Flaky {
  std::vector<int> fail;  // by row
  std::vector<const sluice_token_view*> out;
};
int g_counting_fills = 0;

void* FlakyCreate(void*, const sluice_processor_config*, sluice_plugin_error*) { return new Flaky; }
void FlakyDestroy(void* p) { delete static_cast<Flaky*>(p); }
void FlakyUpdate(void* p, const sluice_batch_update* u) {
  Flaky& f = *static_cast<Flaky*>(p);
  for (int32_t i = 0; i < u->num_removed; ++i) f.out[u->removed[i]] = nullptr;
  f.fail.resize(std::max<size_t>(f.fail.size(), u->batch_size + u->num_moved + u->num_added));
  f.out.resize(f.fail.size());
  for (int32_t i = 0; i < u->num_added; ++i) {
    const sluice_added_row& a = u->added[i];
    f.fail[a.row] = std::string(a.params->extra_args).find("\"fail\":true") != std::string::npos;
    f.out[a.row] = a.output;
  }
  for (int32_t i = 0; i < u->num_moved; ++i) {
    f.fail[u->moved[i].to] = f.fail[u->moved[i].from];
    f.out[u->moved[i].to] = f.out[u->moved[i].from];
  }
}
int FlakyFill(void* p, int32_t row, uint32_t*, sluice_plugin_error* err) {
  Flaky& f = *static_cast<Flaky*>(p);
  if (f.fail[row] && f.out[row]->size >= 1) return sluice_plugin_fail(err, "flaky by request");
  return 0;
}
int CountingFill(void*, int32_t, uint32_t*, sluice_plugin_error*) {
  ++g_counting_fills;
  return 0;
}

// "sparse" (ABI 1.3 fill_allowed): what each row's extra_args "mode" asks: "list" ids
// {11, 12, 11}; "oob" {5, vocab}; "neg" {-1}; "empty" no id; "overflow" a list over capacity
// (its bitmask, token 7 only, is used); anything else no list (the bitmask allows all, or
// {11, 12} in "list" mode, for rows another processor also constrains).
struct Sparse {
  int32_t vocab = 0;
  std::vector<std::string> mode;  // by row
};
int g_counting_lists = 0;

void* SparseCreate(void*, const sluice_processor_config* c, sluice_plugin_error*) {
  auto* s = new Sparse;
  s->vocab = c->vocab_size;
  return s;
}
void SparseDestroy(void* p) { delete static_cast<Sparse*>(p); }
void SparseUpdate(void* p, const sluice_batch_update* u) {
  Sparse& s = *static_cast<Sparse*>(p);
  s.mode.resize(std::max<size_t>(s.mode.size(), u->batch_size + u->num_moved + u->num_added));
  for (int32_t i = 0; i < u->num_added; ++i) {
    const std::string args = u->added[i].params->extra_args;
    std::string mode;
    for (const char* m : {"list", "oob", "neg", "empty", "overflow"}) {
      if (args.find(std::string("\"mode\":\"") + m + "\"") != std::string::npos) mode = m;
    }
    s.mode[u->added[i].row] = mode;
  }
  for (int32_t i = 0; i < u->num_moved; ++i) s.mode[u->moved[i].to] = s.mode[u->moved[i].from];
}
int SparseAllowed(void* p, int32_t row, int32_t* ids, int32_t capacity, int32_t* count,
                  sluice_plugin_error*) {
  const Sparse& s = *static_cast<Sparse*>(p);
  const std::string& m = s.mode[row];
  std::vector<int32_t> list;
  if (m == "list") list = {11, 12, 11};
  if (m == "oob") list = {5, s.vocab};
  if (m == "neg") list = {-1};
  if (m == "empty") *count = 0;
  if (m == "overflow") *count = capacity + 1;
  if (!list.empty()) {
    std::copy(list.begin(), list.end(), ids);
    *count = static_cast<int32_t>(list.size());
  }
  return 0;
}
int SparseFill(void* p, int32_t row, uint32_t* mask, sluice_plugin_error*) {
  const Sparse& s = *static_cast<Sparse*>(p);
  const std::string& m = s.mode[row];
  if (m != "overflow" && m != "list") return 0;
  std::fill(mask, mask + (s.vocab + 31) / 32, 0u);
  for (int32_t t : m == "list" ? std::vector<int32_t>{11, 12} : std::vector<int32_t>{7}) {
    mask[t / 32] |= 1u << (t % 32);
  }
  return 0;
}
int CountingAllowed(void*, int32_t, int32_t*, int32_t, int32_t*, sluice_plugin_error*) {
  ++g_counting_lists;  // no list: counting's fill_bitmask follows
  return 0;
}

std::shared_ptr<PluginSet> TestProcessors() {
  auto set = std::make_shared<PluginSet>();
  sluice_logits_processor lp{};
  lp.struct_size = sizeof lp;
  lp.name = "flaky";
  lp.create = FlakyCreate;
  lp.destroy = FlakyDestroy;
  lp.update_state = FlakyUpdate;
  lp.fill_bitmask = FlakyFill;
  EXPECT_TRUE(set->Register(lp, "test").ok());
  lp.name = "counting";
  lp.flags = SLUICE_LP_ARGMAX_INVARIANT;
  lp.fill_bitmask = CountingFill;
  EXPECT_TRUE(set->Register(lp, "test").ok());
  lp.name = "counting_sparse";
  lp.fill_allowed = CountingAllowed;
  EXPECT_TRUE(set->Register(lp, "test").ok());
  lp = sluice_logits_processor{};
  lp.struct_size = sizeof lp;
  lp.name = "sparse";
  lp.create = SparseCreate;
  lp.destroy = SparseDestroy;
  lp.update_state = SparseUpdate;
  lp.fill_bitmask = SparseFill;
  lp.fill_allowed = SparseAllowed;
  EXPECT_TRUE(set->Register(lp, "test").ok());
  EXPECT_TRUE(set->LoadLibrary(kPluginDir + "/fsm_logits.so").ok());
  return set;
}

std::unique_ptr<Generator> LoadWith(std::shared_ptr<const PluginSet> plugins) {
  auto bundle = LoadModelBundle(DemoChat());
  EXPECT_TRUE(bundle.ok());
  GenerationOptions o;
  o.backend.device = testing::TestDevice();
  o.backend.num_threads = 2;
  o.kv_cache_memory = 16 << 20;
  o.plugins = std::move(plugins);
  auto g = Generator::Load(*bundle, o);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

std::shared_ptr<GenerateRequest> Req(const std::string& id, std::vector<std::string> procs,
                                     std::string extra, float temperature = 0.8f) {
  SamplingParams p = testing::Greedy(6);
  p.temperature = temperature;
  p.seed = 3;
  p.logits_processors = std::move(procs);
  p.extra_args = std::move(extra);
  auto r = testing::Request({5, 6, 7, 8, 9}, p);
  r->id = id;
  return r;
}

TEST(LogitsProcessors, AFailingProcessorFailsOnlyItsRequest) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  std::map<std::string, Status> done;
  std::vector<std::shared_ptr<GenerateRequest>> reqs = {
      Req("ok1", {"flaky"}, R"({"fail":false})"), Req("bad", {"flaky"}, R"({"fail":true})"),
      Req("ok2", {}, ""), Req("ok3", {"flaky", "fsm"}, R"({"fsm":{"states":[{}]}})")};
  for (auto& r : reqs) {
    r->sink.on_done = [&](GenerateRequest& q, const Status& st) { done[q.id] = st; };
  }
  testing::RunAll(*g, reqs);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done["bad"].code(), StatusCode::kInternal);
  EXPECT_EQ(done["bad"].message(), "logits processor flaky: flaky by request");
  for (const char* id : {"ok1", "ok2", "ok3"}) EXPECT_TRUE(done[id].ok()) << id;
  for (const auto& r : reqs) {
    if (r->id != "bad") {
      EXPECT_EQ(r->outputs[0].token_ids.size(), 6u) << r->id;
    }
  }
}

TEST(LogitsProcessors, ArgmaxInvariantSkipsGreedyRows) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  g_counting_fills = 0;
  testing::RunAll(*g, {Req("greedy", {"counting"}, "", 0.f)});
  EXPECT_EQ(g_counting_fills, 0);
  testing::RunAll(*g, {Req("sampled", {"counting"}, "", 0.7f)});
  EXPECT_EQ(g_counting_fills, 6);
  // The same with fill_allowed: skipped for greedy rows; else asked, no list, then the mask.
  g_counting_fills = g_counting_lists = 0;
  testing::RunAll(*g, {Req("greedy", {"counting_sparse"}, "", 0.f)});
  EXPECT_EQ(g_counting_lists + g_counting_fills, 0);
  testing::RunAll(*g, {Req("sampled", {"counting_sparse"}, "", 0.7f)});
  EXPECT_EQ(g_counting_lists, 6);
  EXPECT_EQ(g_counting_fills, 6);
}

// One batch of sparse-list rows, bitmask rows (a list over capacity, two processors on one
// row, a structured output) and unconstrained rows: each samples only what it allows.
TEST(LogitsProcessors, SparseAndBitmaskRowsInOneBatch) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintSpec::Kind::kChoice;
  choice.field = "guided_choice";
  choice.choices = {"river", "sea"};
  auto structured = Req("structured", {}, "");
  structured->params.constraint = choice;
  structured->params.ignore_eos = false;
  structured->params.max_tokens = 20;
  const std::string fsm = R"({"fsm":{"states":[{"allow":[11,12,13]}]}})";
  std::vector<std::shared_ptr<GenerateRequest>> reqs = {
      Req("list", {"sparse"}, R"({"mode":"list"})"),
      Req("overflow", {"sparse"}, R"({"mode":"overflow"})"),
      Req("both", {"sparse", "fsm"}, R"({"mode":"list","fsm":{"states":[{"allow":[12,13]}]}})"),
      Req("fsm", {"fsm"}, fsm),
      Req("fsm_greedy_logprobs", {"fsm"}, fsm, 0.f),
      Req("plain", {}, ""),
      structured};
  reqs[4]->params.logprobs = 2;
  std::map<std::string, Status> done;
  for (auto& r : reqs) {
    r->sink.on_done = [&](GenerateRequest& q, const Status& st) { done[q.id] = st; };
  }
  testing::RunAll(*g, reqs);
  ASSERT_EQ(done.size(), reqs.size());
  for (const auto& [id, st] : done) EXPECT_TRUE(st.ok()) << id << ": " << st.ToString();
  auto tokens = [&](int i) { return reqs[static_cast<size_t>(i)]->outputs[0].token_ids; };
  auto only = [&](int i, std::set<int32_t> allowed) {
    EXPECT_EQ(tokens(i).size(), 6u) << reqs[static_cast<size_t>(i)]->id;
    for (int32_t t : tokens(i)) EXPECT_TRUE(allowed.count(t)) << reqs[i]->id << ": " << t;
  };
  only(0, {11, 12});
  only(1, {7});
  only(2, {12});
  only(3, {11, 12, 13});
  only(4, {11, 12, 13});
  EXPECT_EQ(reqs[6]->outputs[0].finish_reason, "stop");
  EXPECT_TRUE(reqs[6]->outputs[0].text == "river" || reqs[6]->outputs[0].text == "sea");
}

// A list with an id outside the vocabulary, a negative id or no id fails only its request,
// naming the processor.
TEST(LogitsProcessors, BadSparseListsFailOnlyTheirRequest) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  std::vector<std::shared_ptr<GenerateRequest>> reqs = {
      Req("oob", {"sparse"}, R"({"mode":"oob"})"), Req("neg", {"sparse"}, R"({"mode":"neg"})"),
      Req("empty", {"sparse"}, R"({"mode":"empty"})"), Req("ok", {"sparse"}, R"({"mode":"list"})"),
      Req("oob_greedy", {"sparse"}, R"({"mode":"oob"})", 0.f)};
  std::map<std::string, Status> done;
  for (auto& r : reqs) {
    r->sink.on_done = [&](GenerateRequest& q, const Status& st) { done[q.id] = st; };
  }
  testing::RunAll(*g, reqs);
  ASSERT_EQ(done.size(), reqs.size());
  EXPECT_EQ(done["oob"].message(),
            "logits processor sparse: allowed token id 1024 is outside the vocabulary [0, 1024)");
  EXPECT_EQ(done["oob_greedy"].message(), done["oob"].message());
  EXPECT_EQ(done["neg"].message(),
            "logits processor sparse: allowed token id -1 is outside the vocabulary [0, 1024)");
  EXPECT_EQ(done["empty"].message(), "logits processors (sparse) allowed no token");
  EXPECT_TRUE(done["ok"].ok());
  EXPECT_EQ(reqs[3]->outputs[0].token_ids.size(), 6u);
}

// fsm_logits with sparse lists (this header) and with bitmasks only (built against the ABI 1.1
// header): the same requests sample the same tokens with the same logprobs.
TEST(LogitsProcessors, SparseListsSampleTheSameTokensAsBitmasks) {
  std::vector<std::vector<CompletionOutput>> runs;
  for (const char* lib : {"/fsm_logits.so", "/fsm_logits_abi11.so"}) {
    auto plugins = LoadPlugins({kPluginDir + lib});
    ASSERT_TRUE(plugins.ok()) << plugins.status().ToString();
    auto g = LoadWith(*plugins);
    ASSERT_NE(g, nullptr);
    std::mt19937 rng(99);
    std::vector<std::shared_ptr<GenerateRequest>> reqs;
    for (int i = 0; i < 12; ++i) {
      TestFsm f = RandomFsm(rng, g->limits().vocab_size, false);
      auto r = Req("r" + std::to_string(i), {"fsm"}, f.Json(), i % 4 == 0 ? 0.f : 0.9f);
      r->params.seed = 17 + static_cast<uint64_t>(i);
      r->params.n = i % 3 == 0 ? 2 : 1;
      r->params.max_tokens = 12;
      r->params.ignore_eos = true;
      if (i % 2 == 0) r->params.logprobs = 3;
      reqs.push_back(r);
    }
    testing::RunAll(*g, reqs);
    std::vector<CompletionOutput> outs;
    for (const auto& r : reqs) {
      ASSERT_TRUE(r->done);
      for (const CompletionOutput& o : r->outputs) outs.push_back(o);
    }
    EXPECT_EQ(g->stats().logits_masks > 0, true);
    runs.push_back(std::move(outs));
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[0][i].token_ids, runs[1][i].token_ids) << i;
    EXPECT_EQ(runs[0][i].finish_reason, runs[1][i].finish_reason) << i;
    ASSERT_EQ(runs[0][i].logprobs.size(), runs[1][i].logprobs.size()) << i;
    for (size_t k = 0; k < runs[0][i].logprobs.size(); ++k) {
      EXPECT_EQ(runs[0][i].logprobs[k].logprob, runs[1][i].logprobs[k].logprob);
      EXPECT_EQ(runs[0][i].logprobs[k].top, runs[1][i].logprobs[k].top);
    }
  }
}

TEST(LogitsProcessors, AMaskWithNoTokenFailsTheRequest) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  // A choice constraint ("river") and an FSM that allows only token 0: nothing is left.
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintSpec::Kind::kChoice;
  choice.field = "guided_choice";
  choice.choices = {"river"};
  auto r = Req("empty", {"fsm"}, R"({"fsm":{"states":[{"allow":[0]}]}})");
  r->params.constraint = choice;
  r->params.ignore_eos = false;
  Status st;
  r->sink.on_done = [&](GenerateRequest&, const Status& s) { st = s; };
  testing::RunAll(*g, {r});
  EXPECT_EQ(st.message(), "logits processors (structured_outputs, fsm) allowed no token");
}

TEST(LogitsProcessors, AdmissionErrors) {
  auto g = LoadWith(TestProcessors());
  ASSERT_NE(g, nullptr);
  Status unknown = g->Add(Req("u", {"nope"}, ""));
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(),
            "logits_processors: unknown logits processor \"nope\" (loaded: flaky, counting, "
            "counting_sparse, sparse, fsm)");
  Status twice = g->Add(Req("t", {"fsm", "fsm"}, R"({"fsm":{"states":[{}]}})"));
  EXPECT_EQ(twice.message(), "logits_processors: \"fsm\" is named twice");
  Status bad = g->Add(Req("b", {"fsm"}, R"({"fsm":{"states":[{"allow":[99999]}]}})"));
  EXPECT_EQ(bad.message(),
            "logits_processors: fsm: extra_args.fsm.states[0].allow: token ids in [0, 1024)");
  Status orphan = g->Add(Req("o", {}, R"({"x":1})"));
  EXPECT_EQ(orphan.message(), "extra_args: given, but no logits_processors read it");
  EXPECT_FALSE(g->HasWork());
  // No plugins at all.
  auto plain = LoadWith(nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->Add(Req("p", {"fsm"}, "{}")).message(),
            "logits_processors: unknown logits processor \"fsm\" (loaded: none)");
}

}  // namespace
}  // namespace sluice
