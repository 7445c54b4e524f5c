// Plugin loading (engine/plugins.h): the example and test libraries of build/<preset>/plugins
// are dlopen'ed; a wrong ABI version, a library that is not a plugin, a failing init and a
// missing file are refused naming the file and the reason; a processor's validate message is
// the admission error. Row bookkeeping (LogitsRows): random joins and leaves produce updates
// that, applied in order (removed, added, moved), reproduce the engine's row numbering.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "engine/logits_processor.h"
#include "engine/plugins.h"

namespace sluice {
namespace {

const std::string kDir = SLUICE_PLUGIN_DIR;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(PluginLoader, LoadsTheFsmExample) {
  auto set = LoadPlugins({kDir + "/fsm_logits.so"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_NE((*set)->Find("fsm"), nullptr);
  EXPECT_EQ((*set)->Names(), "fsm");
  EXPECT_EQ((*set)->libraries().size(), 1u);
  // The same file twice (the flag and sluice.json) is loaded once.
  ASSERT_TRUE((*set)->LoadLibrary(kDir + "/../plugins/fsm_logits.so").ok());
  EXPECT_EQ((*set)->processors().size(), 1u);
  // Its validate message is the request's error.
  sluice_request_params p{};
  p.struct_size = sizeof p;
  p.request_id = "r";
  p.extra_args = R"({"fsm": {"states": [{"allow": [5000]}]}})";
  p.extra_args_len = std::strlen(p.extra_args);
  p.vocab_size = 1024;
  Status st = (*set)->Find("fsm")->Validate(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "logits_processors: fsm: extra_args.fsm.states[0].allow: token ids in "
            "[0, 1024)");
  p.extra_args = R"({"fsm": {"states": [{"allow": [5]}, {"next": {"7": 0}}], "start": 1}})";
  p.extra_args_len = std::strlen(p.extra_args);
  EXPECT_TRUE((*set)->Find("fsm")->Validate(p).ok());
  for (const char* bad :
       {"{}", "[1]", R"({"fsm": {"states": []}})", R"({"fsm": {"states": [{"next": {"x": 0}}]}})",
        R"({"fsm": {"states": [{"else": 3}]}})", R"({"fsm": {"states": [{}], "extra": 1}})",
        "{\"fsm\": "}) {
    p.extra_args = bad;
    p.extra_args_len = std::strlen(bad);
    EXPECT_EQ((*set)->Find("fsm")->Validate(p).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PluginLoader, RefusesAWrongAbiVersion) {
  auto set = LoadPlugins({kDir + "/test_plugin_wrong_abi.so"});
  ASSERT_FALSE(set.ok());
  const std::string m = set.status().message();
  EXPECT_TRUE(Contains(m, "test_plugin_wrong_abi.so")) << m;
  EXPECT_TRUE(Contains(m, "plugin ABI version " + std::to_string(SLUICE_PLUGIN_ABI_VERSION + 1) +
                              ", this sluice has ABI version " +
                              std::to_string(SLUICE_PLUGIN_ABI_VERSION)))
      << m;
  EXPECT_FALSE(Contains(m, "init must not run")) << m;
}

TEST(PluginLoader, RefusesWhatIsNotAPlugin) {
  auto a = LoadPlugins({kDir + "/test_plugin_no_symbols.so"});
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(),
                       "test_plugin_no_symbols.so: missing symbol "
                       "sluice_plugin_abi_version"))
      << a.status().message();
  auto b = LoadPlugins({kDir + "/no_such_plugin.so"});
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(Contains(b.status().message(), "no_such_plugin.so: cannot open"))
      << b.status().message();
  // A file that is not a shared library at all.
  auto c = LoadPlugins({std::string(SLUICE_FIXTURES_DIR) + "/../../README.md"});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "README.md: dlopen failed")) << c.status().message();
}

TEST(PluginLoader, AFailingInitLeavesNothingRegistered) {
  PluginSet set;
  Status st = set.LoadLibrary(kDir + "/test_plugin_failing_init.so");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(),
                       "test_plugin_failing_init.so: sluice_plugin_init failed: "
                       "no licence file found"))
      << st.message();
  EXPECT_EQ(set.Find("half_registered"), nullptr);
  EXPECT_TRUE(set.empty());
}

int Fill(void*, int32_t, uint32_t*, sluice_plugin_error*) { return 0; }
void Update(void*, const sluice_batch_update*) {}
void* Create(void*, const sluice_processor_config*, sluice_plugin_error*) {
  static int instance;
  return &instance;
}

TEST(PluginLoader, RegistrationErrors) {
  PluginSet set;
  sluice_logits_processor lp{};
  lp.struct_size = sizeof lp;
  lp.name = "ok";
  lp.create = Create;
  lp.update_state = Update;
  lp.fill_bitmask = Fill;
  ASSERT_TRUE(set.Register(lp, "a.so").ok());
  Status dup = set.Register(lp, "b.so");
  EXPECT_TRUE(Contains(dup.message(), "logits processor ok is already registered by a.so"))
      << dup.message();
  sluice_logits_processor bad = lp;
  bad.name = "";
  EXPECT_FALSE(set.Register(bad, "b.so").ok());
  bad.name = "has space";
  EXPECT_FALSE(set.Register(bad, "b.so").ok());
  bad.name = kStructuredProcessorName;
  EXPECT_TRUE(Contains(set.Register(bad, "b.so").message(), "reserved"));
  bad = lp;
  bad.name = "nofill";
  bad.fill_bitmask = nullptr;
  EXPECT_FALSE(set.Register(bad, "b.so").ok());
  bad = lp;
  bad.name = "small";
  bad.struct_size = 8;
  EXPECT_FALSE(set.Register(bad, "b.so").ok());
  EXPECT_EQ(set.Names(), "ok");
}

int Allowed(void*, int32_t, int32_t* ids, int32_t, int32_t* count, sluice_plugin_error*) {
  ids[0] = 3;
  *count = 1;
  return 0;
}

// ABI 1.3's fill_allowed is read only from a struct whose struct_size covers it: a plugin of
// minor 0 to 2 (whose struct ends at fill_bitmask; whatever follows is not its) gets bitmasks.
TEST(PluginLoader, FillAllowedOnlyFromAStructThatHasIt) {
  PluginSet set;
  sluice_logits_processor lp{};
  lp.struct_size = sizeof lp;
  lp.name = "sparse";
  lp.create = Create;
  lp.update_state = Update;
  lp.fill_bitmask = Fill;
  lp.fill_allowed = Allowed;
  ASSERT_TRUE(set.Register(lp, "a.so").ok());
  lp.name = "old";
  lp.struct_size = offsetof(sluice_logits_processor, fill_allowed);  // ABI 1.0 - 1.2
  ASSERT_TRUE(set.Register(lp, "a.so").ok());
  lp.name = "shorter";
  lp.struct_size = offsetof(sluice_logits_processor, fill_allowed) - 1;
  Status small = set.Register(lp, "a.so");
  EXPECT_TRUE(Contains(small.message(), "is smaller than ABI 1.0's")) << small.message();
  auto sparse = set.Find("sparse")->Create(1024, 4);
  auto old = set.Find("old")->Create(1024, 4);
  ASSERT_TRUE(sparse.ok() && old.ok());
  EXPECT_TRUE((*sparse)->has_allowed());
  EXPECT_FALSE((*old)->has_allowed());
  int32_t ids[4], count = -1;
  ASSERT_TRUE((*sparse)->FillAllowed(0, ids, 4, &count).ok());
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ids[0], 3);
  // The example plugin: built against this header it lists; against the ABI 1.1 header
  // (tests/plugins/abi_1_1) it loads and has bitmasks only.
  auto cur = LoadPlugins({kDir + "/fsm_logits.so"});
  auto abi11 = LoadPlugins({kDir + "/fsm_logits_abi11.so"});
  ASSERT_TRUE(cur.ok() && abi11.ok()) << abi11.status().ToString();
  auto a = (*cur)->Find("fsm")->Create(1024, 4);
  auto b = (*abi11)->Find("fsm")->Create(1024, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->has_allowed());
  EXPECT_FALSE((*b)->has_allowed());
}

// A processor that replays the updates onto its own table.
class Mirror final : public LogitsProcessor {
 public:
  const std::string& name() const override { return name_; }
  void UpdateState(const LpUpdate& u) override {
    ++updates;
    for (int32_t r : u.removed) {
      ASSERT_LT(r, static_cast<int32_t>(table.size()));
      ASSERT_NE(table[r], -1) << "removed an empty row";
      table[r] = -1;
    }
    if (table.size() < static_cast<size_t>(u.batch_size)) table.resize(u.batch_size, -1);
    for (const LpAddedRow& a : u.added) {
      ASSERT_LT(a.c.row, u.batch_size + static_cast<int32_t>(u.moved.size()));
      if (table.size() <= static_cast<size_t>(a.c.row)) table.resize(a.c.row + 1, -1);
      ASSERT_EQ(table[a.c.row], -1) << "added into a row in use";
      table[a.c.row] = static_cast<int>(a.c.prompt.size);  // the sequence's key
      if (a.c.flags & SLUICE_ROW_RESET) ++resets;
    }
    for (const sluice_moved_row& m : u.moved) {
      ASSERT_EQ(m.kind, SLUICE_MOVE_ONE_WAY);
      ASSERT_NE(table[m.from], -1);
      ASSERT_EQ(table[m.to], -1);
      table[m.to] = table[m.from];
      table[m.from] = -1;
      ++moves;
    }
    for (size_t r = static_cast<size_t>(u.batch_size); r < table.size(); ++r) {
      ASSERT_EQ(table[r], -1) << "a row in use past batch_size";
    }
    table.resize(u.batch_size);
    for (int v : table) ASSERT_NE(v, -1) << "a hole below batch_size";
  }
  Status FillMask(int32_t, uint32_t*) override { return Status::Ok(); }
  std::vector<int> table;
  int updates = 0, resets = 0, moves = 0;

 private:
  std::string name_ = "mirror";
};

TEST(LogitsRows, UpdatesReproduceTheRowNumbering) {
  Mirror m;
  LogitsRows rows(&m, 64);
  std::mt19937 rng(7);
  std::vector<std::unique_ptr<LpSlot>> seqs;  // key = index (as prompt.size)
  std::set<int> in;                           // keys with a row (or joining)
  for (int step = 0; step < 2000; ++step) {
    const int ops = static_cast<int>(rng() % 5);
    for (int k = 0; k < ops; ++k) {
      if (rng() % 2 == 0 && in.size() < 40) {
        int key = static_cast<int>(rng() % 60);
        while (static_cast<size_t>(key) >= seqs.size()) {
          seqs.push_back(std::make_unique<LpSlot>());
          seqs.back()->info.c.prompt.size = static_cast<int64_t>(seqs.size() - 1);
        }
        if (in.count(key)) continue;
        rows.Add(seqs[key].get());
        in.insert(key);
      } else if (!in.empty()) {
        auto it = in.begin();
        std::advance(it, rng() % in.size());
        rows.Remove(seqs[*it].get());
        in.erase(it);
      }
    }
    rows.Flush({});
    ASSERT_EQ(rows.batch_size(), static_cast<int32_t>(in.size()));
    ASSERT_EQ(m.table.size(), in.size());
    for (int key : in) {
      const int32_t r = seqs[key]->row;
      ASSERT_GE(r, 0);
      ASSERT_EQ(m.table[r], key) << "step " << step;
    }
  }
  EXPECT_GT(m.moves, 100);
  EXPECT_GT(m.resets, 100);  // a key joining again after it left is reported as a reset
}

}  // namespace
}  // namespace sluice
