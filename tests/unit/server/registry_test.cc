// Model registry (load, switch, drain, failure isolation, idempotency) with fake models;
// the router's `model` field peek; merging Prometheus expositions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "server/model_registry.h"
#include "server/router.h"

namespace sluice::server {
namespace {
namespace fs = std::filesystem;

struct Log {
  std::mutex mu;
  std::multiset<std::string> alive;  // "name:version" of models not destroyed
  int loads = 0;
  std::set<int64_t> fail_load, fail_warmup;
  std::map<std::string, int> warmups;  // "name:version" -> WarmUp calls
  // "name:version" -> the placements it was held on and for how long (ms), in order.
  std::map<std::string, std::vector<std::pair<LoopPlacement, int64_t>>> holds;
};

class FakeModel : public ServedModel {
 public:
  FakeModel(Log* log, std::string id, bool fail_warmup)
      : log_(log), id_(std::move(id)), fail_warmup_(fail_warmup) {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->alive.insert(id_);
  }
  ~FakeModel() override {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->alive.erase(log_->alive.find(id_));
  }
  std::string task() const override { return "score"; }
  bool generation() const override { return false; }
  int64_t max_model_len() const override { return 8; }
  bool ServesRoute(const std::string&) const override { return true; }
  Status WarmUp() override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      ++log_->warmups[id_];
    }
    return fail_warmup_ ? Internal("warm-up forward failed") : Status::Ok();
  }
  void SetReady() override {}
  // Version V's threads "run" on CPUs 10 * V and 10 * V + 1.
  LoopPlacement placement() const override {
    const int v = std::stoi(id_.substr(id_.find(':') + 1));
    return {10 * v, 10 * v + 1};
  }
  void HoldPlacement(const LoopPlacement& p, std::chrono::milliseconds duration) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->holds[id_].push_back({p, duration.count()});
  }
  void Handle(HttpRequest&&, std::shared_ptr<Exchange> ex) override { ex->Respond({}); }
  std::string RenderMetrics() const override { return ""; }
  void Shutdown() override {}

 private:
  Log* log_;
  std::string id_;
  bool fail_warmup_;
};

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-registry-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    AddVersion("m", 1);
    auto r = serving::Repository::Open(root_.string(), {});
    ASSERT_TRUE(r.ok());
    repo_ = std::make_unique<serving::Repository>(std::move(r).value());
    RegistryOptions o;
    o.drain_timeout_s = 30;
    registry_ = std::make_unique<ModelRegistry>(
        repo_.get(),
        [this](const LoadSpec& spec) -> StatusOr<std::unique_ptr<ServedModel>> {
          bool fail_warmup = false;
          {
            std::lock_guard<std::mutex> lock(log_.mu);
            ++log_.loads;
            if (log_.fail_load.count(spec.version)) return InvalidArgument("corrupt weights");
            fail_warmup = log_.fail_warmup.count(spec.version) > 0;
          }
          return std::unique_ptr<ServedModel>(std::make_unique<FakeModel>(
              &log_, spec.name + ":" + std::to_string(spec.version), fail_warmup));
        },
        o);
  }
  void TearDown() override {
    registry_.reset();
    fs::remove_all(root_);
  }
  void AddVersion(const std::string& name, int64_t v) {
    fs::create_directories(root_ / name / std::to_string(v));
  }
  void WriteConfig(const std::string& name, const std::string& json) {
    std::ofstream(root_ / name / "model.json") << json;
  }
  int64_t DefaultOf(const std::string& name) {
    auto t = registry_->table();
    auto it = t->find(name);
    return it == t->end() ? 0 : it->second.default_version;
  }
  std::vector<int64_t> VersionsOf(const std::string& name) {
    std::vector<int64_t> out;
    auto t = registry_->table();
    auto it = t->find(name);
    if (it != t->end()) {
      for (const auto& [v, s] : it->second.versions) out.push_back(v);
    }
    return out;
  }
  bool Alive(const std::string& id) {
    std::lock_guard<std::mutex> lock(log_.mu);
    return log_.alive.count(id) > 0;
  }

  fs::path root_;
  Log log_;
  std::unique_ptr<serving::Repository> repo_;
  std::unique_ptr<ModelRegistry> registry_;
};

TEST_F(RegistryTest, LoadIsIdempotentAndRoutes) {
  ASSERT_TRUE(registry_->Load("m").ok());
  ASSERT_TRUE(registry_->Load("m").ok());
  EXPECT_EQ(log_.loads, 1);
  EXPECT_EQ(DefaultOf("m"), 1);
  auto lease = registry_->Acquire("m", std::nullopt);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->version(), 1);
  EXPECT_EQ(registry_->active(), 1);
  lease->Release();
  EXPECT_EQ(registry_->active(), 0);
  auto none = registry_->Acquire("x", std::nullopt);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("\"m\" (version 1)"), std::string::npos)
      << none.status().message();
  EXPECT_EQ(registry_->Acquire("m", 2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry_->Load("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(registry_->Load("../m").code(), StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, RedBlackSwitchDrainsTheOldVersion) {
  ASSERT_TRUE(registry_->Load("m").ok());
  auto held = registry_->Acquire("m", std::nullopt);
  ASSERT_TRUE(held.ok());
  AddVersion("m", 2);
  auto done = std::async(std::launch::async, [&] { return registry_->Load("m"); });
  // The switch happens before the drain: new requests get version 2 while 1 is held.
  for (int i = 0; i < 5000 && DefaultOf("m") != 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(DefaultOf("m"), 2);
  auto next = registry_->Acquire("m", std::nullopt);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->version(), 2);
  EXPECT_EQ(registry_->Acquire("m", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  EXPECT_TRUE(Alive("m:1"));  // still serving its in-flight request
  held->Release();
  ASSERT_TRUE(done.get().ok());
  EXPECT_FALSE(Alive("m:1"));
  EXPECT_TRUE(Alive("m:2"));
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{2}));
  // Rollback: version 1 loads again, 2 drains.
  next->Release();
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{1}));
  EXPECT_FALSE(Alive("m:2"));
  EXPECT_EQ(registry_->SetDefault("m", 9).code(), StatusCode::kNotFound);
  EXPECT_EQ(DefaultOf("m"), 1);
  EXPECT_EQ(registry_->SetDefault("other", 1).code(), StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, FailedLoadLeavesTheServingVersion) {
  ASSERT_TRUE(registry_->Load("m").ok());
  AddVersion("m", 2);
  log_.fail_load.insert(2);
  Status s = registry_->Load("m");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version 2"), std::string::npos) << s.message();
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{1}));
  EXPECT_TRUE(Alive("m:1"));
  log_.fail_load.clear();
  log_.fail_warmup.insert(2);
  EXPECT_FALSE(registry_->Load("m").ok());
  EXPECT_EQ(DefaultOf("m"), 1);
  EXPECT_FALSE(Alive("m:2"));
  bool found = false;
  for (const auto& e : registry_->Index()) {
    if (e.name == "m" && e.version == 2) {
      found = true;
      EXPECT_EQ(e.state, "UNAVAILABLE");
      EXPECT_NE(e.reason.find("warm-up"), std::string::npos) << e.reason;
    }
  }
  EXPECT_TRUE(found);
  // With `all`, one failing version of two discards the other new one too.
  WriteConfig("m", R"({"version_policy": {"all": {}}})");
  AddVersion("m", 3);
  log_.fail_warmup.clear();
  log_.fail_load.insert(3);
  EXPECT_FALSE(registry_->Load("m").ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{1}));
  EXPECT_FALSE(Alive("m:2"));
}

TEST_F(RegistryTest, VersionedAndUnload) {
  AddVersion("m", 2);
  AddVersion("m", 3);
  WriteConfig("m", R"({"version_policy": {"latest": {"num_versions": 2}}})");
  ASSERT_TRUE(registry_->Load("m").ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(DefaultOf("m"), 3);
  ASSERT_TRUE(registry_->SetDefault("m", 2).ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{2, 3}));  // the newest stays
  EXPECT_EQ(DefaultOf("m"), 2);
  // A config override reloads with the new policy.
  ASSERT_TRUE(registry_->Load("m", R"({"version_policy": {"specific": {"versions": [1]}}})").ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{1}));
  EXPECT_FALSE(registry_->Load("m", R"({"bogus": 1})").ok());
  EXPECT_EQ(VersionsOf("m"), (std::vector<int64_t>{1}));
  auto held = registry_->Acquire("m", 1);
  ASSERT_TRUE(held.ok());
  auto done = std::async(std::launch::async, [&] { return registry_->Unload("m"); });
  for (int i = 0; i < 5000 && !registry_->table()->empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(registry_->table()->empty());
  EXPECT_TRUE(Alive("m:1"));
  held->Release();
  EXPECT_TRUE(done.get().ok());
  EXPECT_FALSE(Alive("m:1"));
  EXPECT_TRUE(registry_->Unload("m").ok());  // idempotent
  EXPECT_EQ(registry_->Unload("nope").code(), StatusCode::kNotFound);
}

TEST_F(RegistryTest, SwitchWarmsTheNewDefaultFirst) {
  // A loaded version that becomes the default runs one warm-up batch before traffic moves.
  AddVersion("m", 2);
  WriteConfig("m", R"({"version_policy": {"all": {}}})");
  ASSERT_TRUE(registry_->Load("m").ok());
  auto warmups = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(log_.mu);
    return log_.warmups[id];
  };
  EXPECT_EQ(warmups("m:1"), 1);  // at load
  EXPECT_EQ(warmups("m:2"), 1);
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());
  EXPECT_EQ(DefaultOf("m"), 1);
  EXPECT_EQ(warmups("m:1"), 2);
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());  // already the default: nothing to warm
  EXPECT_EQ(warmups("m:1"), 2);
  ASSERT_TRUE(registry_->SetDefault("m", 2).ok());
  EXPECT_EQ(warmups("m:2"), 2);
  EXPECT_EQ(warmups("m:1"), 2);
}

TEST_F(RegistryTest, SwitchHandsTheOldDefaultsPlacementToTheNewOne) {
  AddVersion("m", 2);
  WriteConfig("m", R"({"version_policy": {"all": {}}})");
  ASSERT_TRUE(registry_->Load("m").ok());  // default 2; nothing served before: no hold
  auto holds = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(log_.mu);
    return log_.holds[id];
  };
  EXPECT_TRUE(holds("m:1").empty());
  EXPECT_TRUE(holds("m:2").empty());
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());
  // The scheduler thread at the switch, then (version 2 had no request left) both threads.
  ASSERT_EQ(holds("m:1").size(), 2u);
  EXPECT_EQ(holds("m:1")[0].first.scheduler_cpu, 20);  // version 2's threads' CPUs
  EXPECT_EQ(holds("m:1")[0].first.engine_cpu, -1);
  EXPECT_EQ(holds("m:1")[0].second, 150);  // RegistryOptions::switch_placement_ms
  EXPECT_EQ(holds("m:1")[1].first.scheduler_cpu, 20);
  EXPECT_EQ(holds("m:1")[1].first.engine_cpu, 21);
  EXPECT_LE(holds("m:1")[1].second, 150);  // what is left of the hold
  EXPECT_GE(holds("m:1")[1].second, 100);
  EXPECT_TRUE(holds("m:2").empty());
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());  // no change of version: no hold
  EXPECT_EQ(holds("m:1").size(), 2u);
  // A red-black load: the fresh version takes the old default's CPUs as well.
  WriteConfig("m", R"({"version_policy": {"latest": {"num_versions": 1}}})");
  AddVersion("m", 3);
  ASSERT_TRUE(registry_->Load("m").ok());
  EXPECT_EQ(DefaultOf("m"), 3);
  ASSERT_EQ(holds("m:3").size(), 2u);
  EXPECT_EQ(holds("m:3")[0].first.scheduler_cpu, 10);
  EXPECT_EQ(holds("m:3")[0].first.engine_cpu, -1);
  EXPECT_EQ(holds("m:3")[1].first.scheduler_cpu, 10);
  EXPECT_EQ(holds("m:3")[1].first.engine_cpu, 11);

  // --switch-placement-ms 0: no hold.
  RegistryOptions o;
  o.switch_placement_ms = 0;
  ModelRegistry off(
      repo_.get(),
      [this](const LoadSpec& spec) -> StatusOr<std::unique_ptr<ServedModel>> {
        return std::unique_ptr<ServedModel>(std::make_unique<FakeModel>(
            &log_, "off-" + spec.name + ":" + std::to_string(spec.version), false));
      },
      o);
  WriteConfig("m", R"({"version_policy": {"all": {}}})");
  ASSERT_TRUE(off.Load("m").ok());
  ASSERT_TRUE(off.SetDefault("m", 1).ok());
  ASSERT_TRUE(off.SetDefault("m", 3).ok());
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    for (const auto& [id, h] : log_.holds) EXPECT_NE(id.rfind("off-", 0), 0u) << id;
  }
  ASSERT_TRUE(off.Unload("m").ok());
}

TEST_F(RegistryTest, SwitchHoldsTheEngineThreadOnlyOnceTheOldDefaultIsIdle) {
  AddVersion("m", 2);
  WriteConfig("m", R"({"version_policy": {"all": {}}})");
  ASSERT_TRUE(registry_->Load("m").ok());  // default 2
  auto holds = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(log_.mu);
    return log_.holds[id];
  };
  // A request still on version 2 when the default moves: its engine CPU is busy, so version
  // 1's engine thread is not held there until that request has been answered.
  auto lease = registry_->Acquire("m", std::nullopt);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->version(), 2);
  std::thread answer([&] {
    // From the scheduler thread's hold (the switch), 40 ms before the request is answered.
    for (int i = 0; i < 5000 && holds("m:1").empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    ASSERT_EQ(holds("m:1").size(), 1u);  // the scheduler thread only, so far
    EXPECT_EQ(holds("m:1")[0].first.scheduler_cpu, 20);
    EXPECT_EQ(holds("m:1")[0].first.engine_cpu, -1);
    lease->Release();
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry_->SetDefault("m", 1).ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  answer.join();
  EXPECT_GE(took, std::chrono::milliseconds(40));  // the call waited for the request
  ASSERT_EQ(holds("m:1").size(), 2u);
  EXPECT_EQ(holds("m:1")[1].first.engine_cpu, 21);
  // The hold still ends 150 ms after the switch: the ~40 ms waited are taken off (less a
  // scheduling gap between the switch's two steps).
  EXPECT_LE(holds("m:1")[1].second, 140);
  EXPECT_GE(holds("m:1")[1].second, 1);

  // A version kept busy past the hold (a client pinned to it): the engine thread is never
  // held, and the switch call returns when the hold would have ended.
  auto pinned = registry_->Acquire("m", 1);
  ASSERT_TRUE(pinned.ok());
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry_->SetDefault("m", 2).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(5));
  ASSERT_EQ(holds("m:2").size(), 1u);
  EXPECT_EQ(holds("m:2")[0].first.scheduler_cpu, 10);
  EXPECT_EQ(holds("m:2")[0].first.engine_cpu, -1);
  pinned->Release();
  ASSERT_TRUE(registry_->Unload("m").ok());
}

TEST_F(RegistryTest, MemoryBudgetRefusesWhatDoesNotFit) {
  RegistryOptions o;
  o.memory_budget_bytes = 250;
  o.estimate = [](const LoadSpec& spec) -> StatusOr<int64_t> { return spec.version * 100; };
  ModelRegistry reg(
      repo_.get(),
      [this](const LoadSpec& spec) -> StatusOr<std::unique_ptr<ServedModel>> {
        return std::unique_ptr<ServedModel>(std::make_unique<FakeModel>(
            &log_, spec.name + ":" + std::to_string(spec.version), false));
      },
      o);
  ASSERT_TRUE(reg.Load("m").ok());  // version 1: 100 bytes
  AddVersion("m", 2);               // 200 more beside version 1 during the switch: 300 > 250
  Status s = reg.Load("m");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--model-memory-budget"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("\"m\" version 1"), std::string::npos) << s.message();
  EXPECT_FALSE(Alive("m:2"));
  EXPECT_EQ(reg.table()->at("m").default_version, 1);
  ASSERT_TRUE(reg.Unload("m").ok());
  EXPECT_TRUE(reg.Load("m").ok());  // alone, version 2 fits
  EXPECT_EQ(reg.table()->at("m").default_version, 2);
}

TEST(PeekStringField, FindsTopLevelOnly) {
  bool bad = false;
  EXPECT_EQ(PeekStringField(R"({"model": "rr:2", "query": "q"})", "model", &bad), "rr:2");
  EXPECT_FALSE(bad);
  EXPECT_EQ(
      PeekStringField(R"({"a": {"model": "x"}, "b": ["model", "}"], "model":"y"})", "model", &bad),
      "y");
  EXPECT_EQ(PeekStringField(R"({"a": 1.5e3, "b": null, "c": true})", "model", &bad), std::nullopt);
  EXPECT_FALSE(bad);
  EXPECT_EQ(PeekStringField(R"({"q": "say \"hi\"", "model": "m"})", "model", &bad), "m");
  EXPECT_EQ(PeekStringField(R"({"model": "a\u0062"})", "model", &bad), "ab");
  EXPECT_EQ(PeekStringField(R"({"model": 3})", "model", &bad), std::nullopt);
  EXPECT_FALSE(bad);
  EXPECT_EQ(PeekStringField("{}", "model", &bad), std::nullopt);
  EXPECT_FALSE(bad);
  for (const char* m : {"", "[1]", "{", R"({"model": "x)", R"({"model" "x"})", "{\"a\":1,}"}) {
    EXPECT_EQ(PeekStringField(m, "model", &bad), std::nullopt) << m;
    EXPECT_TRUE(bad) << m;
  }
}

TEST(MergeExpositions, OneHeaderPerFamily) {
  const std::string a =
      "# HELP x_total X.\n# TYPE x_total counter\nx_total{model=\"a\"} 1\n"
      "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n";
  const std::string b =
      "# HELP x_total X.\n# TYPE x_total counter\nx_total{model=\"b\"} 2\n"
      "# HELP y Y.\n# TYPE y gauge\ny 3\n";
  EXPECT_EQ(MergeExpositions({a, b}),
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{model=\"a\"} 1\n"
            "x_total{model=\"b\"} 2\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"
            "# HELP y Y.\n# TYPE y gauge\ny 3\n");
  EXPECT_EQ(LabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace sluice::server
