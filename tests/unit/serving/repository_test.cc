// Model repository: model.json parsing, names and versions, version policies, the layout
// on disk and links out of it.
#include "serving/repository.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace sluice::serving {
namespace {
namespace fs = std::filesystem;

TEST(ModelConfig, ParsesEveryField) {
  auto c = ParseModelConfig(
      R"({"version_policy": {"latest": {"num_versions": 2}}, "default_version": "3",
          "task": "score", "dtype": "float32", "device": "cpu", "max_batch_tokens": 512,
          "max_num_seqs": 8, "max_queue_depth": 4, "max_inputs_per_request": 10,
          "max_tokens_per_input": 0, "truncate": true, "plugins": ["lib/a.so", "/opt/b.so"]})",
      "m/model.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->plugins, (std::vector<std::string>{"lib/a.so", "/opt/b.so"}));
  EXPECT_EQ(c->policy.kind, VersionPolicy::Kind::kLatest);
  EXPECT_EQ(c->policy.latest, 2);
  EXPECT_EQ(c->default_version, 3);
  EXPECT_EQ(*c->task, "score");
  EXPECT_EQ(*c->max_batch_tokens, 512);
  EXPECT_EQ(*c->max_tokens_per_input, 0);
  EXPECT_TRUE(*c->truncate);
  auto s = ParseModelConfig(R"({"version_policy": {"specific": {"versions": [3, "1", 3]}}})", "x");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->policy.versions, (std::vector<int64_t>{1, 3}));
  auto a = ParseModelConfig(R"({"version_policy": {"all": {}}})", "x");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->policy.kind, VersionPolicy::Kind::kAll);
  EXPECT_EQ(DescribePolicy(s->policy), "specific [1, 3]");
}

TEST(ModelConfig, OverridesOnlyWhatIsGiven) {
  auto base = ParseModelConfig(R"({"task": "score", "max_num_seqs": 8})", "base");
  ASSERT_TRUE(base.ok());
  auto c = ParseModelConfig(R"({"max_num_seqs": 2})", "config", *base);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c->task, "score");
  EXPECT_EQ(*c->max_num_seqs, 2);
}

TEST(ModelConfig, RefusesWhatItDoesNotKnow) {
  for (const char* bad :
       {R"({"plugins": "a.so"})", R"({"plugins": [3]})", R"({"plugins": [""]})",
        R"({"plugins": {"a": "b"}})", R"({"plugin": []})", R"({"version_policy": {"latest": {}}})",
        R"({"version_policy": {"latest": {"num_versions": 0}}})",
        R"({"version_policy": {"all": {}, "latest": {"num_versions": 1}}})",
        R"({"version_policy": {"specific": {"versions": []}}})",
        R"({"version_policy": {"specific": {"versions": ["01"]}}})",
        R"({"version_policy": "latest"})", R"({"default_version": 0})",
        R"({"default_version": "x"})", R"({"max_num_seqs": 0})", R"({"task": 3})",
        R"({"truncate": "yes"})", R"([1])", R"({)"}) {
    auto c = ParseModelConfig(bad, "m/model.json");
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(c.status().message().find("m/model.json"), std::string::npos)
          << c.status().message();
    }
  }
  auto c = ParseModelConfig(R"({"plugins": [3]})", "m/model.json");
  EXPECT_NE(c.status().message().find("\"plugins[0]\""), std::string::npos) << c.status().message();
  auto u = ParseModelConfig(R"({"plugin": ["a.so"]})", "m/model.json");
  EXPECT_NE(u.status().message().find("\"plugin\""), std::string::npos) << u.status().message();
}

TEST(ModelConfig, PluginsReplaceTheBaseAndAreRefusedInAnOverride) {
  auto base = ParseModelConfig(R"({"plugins": ["a.so", "b.so"]})", "base");
  ASSERT_TRUE(base.ok());
  auto none = ParseModelConfig(R"({"plugins": []})", "config", *base);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->plugins.empty());
  auto kept = ParseModelConfig(R"({"max_num_seqs": 2})", "config", *base);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->plugins, base->plugins);
  // A load request's override (allow_plugins false) may not name libraries, not even none.
  for (const char* j : {R"({"plugins": []})", R"({"plugins": ["a.so"]})"}) {
    auto o = ParseModelConfig(j, "config", *base, /*allow_plugins=*/false);
    ASSERT_FALSE(o.ok()) << j;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find("config: \"plugins\" may be set only in the model's "
                                        "model.json"),
              std::string::npos)
        << o.status().message();
  }
  EXPECT_TRUE(ParseModelConfig(R"({"max_num_seqs": 2})", "config", *base, false).ok());
}

TEST(Names, RefuseTraversalAndOddCharacters) {
  for (const char* ok : {"a", "demo-reranker", "bge_small.v1", "A9"}) {
    EXPECT_TRUE(ValidateName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "..", ".", "../x", "a/b", "/etc", "a..b", ".hidden", "-x", "_x",
                          "a b", "a:1", "%2e%2e", "a\\b"}) {
    EXPECT_FALSE(ValidateName(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateName(std::string(129, 'a')).ok());
}

TEST(Versions, DigitsOnly) {
  EXPECT_EQ(*ParseVersion("1"), 1);
  EXPECT_EQ(*ParseVersion("42"), 42);
  for (const char* bad : {"", "0", "01", "-1", "+1", "1.0", "x", "..", "99999999999999999"}) {
    EXPECT_FALSE(ParseVersion(bad).ok()) << bad;
  }
  std::string name;
  std::optional<int64_t> v;
  ASSERT_TRUE(SplitModelRef("rr:2", &name, &v).ok());
  EXPECT_EQ(name, "rr");
  EXPECT_EQ(v, 2);
  ASSERT_TRUE(SplitModelRef("rr", &name, &v).ok());
  EXPECT_EQ(name, "rr");
  EXPECT_FALSE(v.has_value());
  EXPECT_FALSE(SplitModelRef("rr:x", &name, &v).ok());
}

TEST(Policy, Selects) {
  const std::vector<int64_t> avail = {1, 2, 5, 7};
  VersionPolicy latest;
  latest.latest = 2;
  EXPECT_EQ(*SelectVersions(latest, avail), (std::vector<int64_t>{5, 7}));
  // A pinned default keeps its place; latest N keeps the newest N-1 others.
  EXPECT_EQ(*SelectVersions(latest, avail, 1), (std::vector<int64_t>{1, 7}));
  latest.latest = 1;
  EXPECT_EQ(*SelectVersions(latest, avail), (std::vector<int64_t>{7}));
  EXPECT_EQ(*SelectVersions(latest, avail, 2), (std::vector<int64_t>{2}));
  VersionPolicy all;
  all.kind = VersionPolicy::Kind::kAll;
  EXPECT_EQ(*SelectVersions(all, avail), avail);
  VersionPolicy spec;
  spec.kind = VersionPolicy::Kind::kSpecific;
  spec.versions = {2, 5};
  EXPECT_EQ(*SelectVersions(spec, avail), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(*SelectVersions(spec, avail, 7), (std::vector<int64_t>{2, 5, 7}));
  spec.versions = {3};
  EXPECT_EQ(SelectVersions(spec, avail).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(SelectVersions(latest, avail, 4).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(SelectVersions(latest, {}).ok());
}

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-repo-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ / "repo";
    fs::create_directories(root_ / "m" / "1");
    fs::create_directories(root_ / "m" / "10");
    fs::create_directories(root_ / "m" / "2");
    fs::create_directories(root_ / "m" / "notaversion");
    std::ofstream(root_ / "m" / "model.json") << R"({"version_policy": {"all": {}}})";
    fs::create_directories(dir_ / "outside" / "1");
    fs::create_directory_symlink(dir_ / "outside", root_ / "escape");
    fs::create_directory_symlink(dir_ / "outside" / "1", root_ / "m" / "3");
    fs::create_directory_symlink(root_ / "m", root_ / "alias");  // inside: fine
    fs::create_directories(root_ / "flat");
    std::ofstream(root_ / "flat" / "config.json") << "{}";
    fs::create_directories(dir_ / "single");
    std::ofstream(dir_ / "single" / "config.json") << "{}";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, root_;
};

TEST_F(RepositoryTest, ListsVersionsInsideOnly) {
  auto r = Repository::Open(root_.string(), {{"s", (dir_ / "single").string()}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->Names(), (std::vector<std::string>{"alias", "escape", "flat", "m", "s"}));
  auto flat = r->Versions("flat");  // a model directory in the repository: version 1
  ASSERT_TRUE(flat.ok());
  ASSERT_EQ(flat->size(), 1u);
  EXPECT_EQ((*flat)[0].version, 1);
  EXPECT_EQ((*flat)[0].path, fs::canonical(root_ / "flat").string());
  auto v = r->Versions("m");
  ASSERT_TRUE(v.ok());
  std::vector<int64_t> got;
  for (const auto& d : *v) got.push_back(d.version);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 10}));  // 3 links out of m/: not a version
  EXPECT_EQ(r->Config("m")->policy.kind, VersionPolicy::Kind::kAll);
  auto s = r->Versions("s");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].version, 1);
  EXPECT_TRUE(r->Versions("alias").ok());
  auto e = r->Versions("escape");
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("out of the repository"), std::string::npos);
  EXPECT_EQ(r->Versions("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->Versions("..").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->Versions("../repo/m").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RepositoryTest, ResolvesPluginsInsideTheRepository) {
  fs::create_directories(root_ / "m" / "lib");
  std::ofstream(root_ / "m" / "lib" / "p.so") << "x";
  fs::create_directories(root_ / "_shared");
  std::ofstream(root_ / "_shared" / "q.so") << "x";
  std::ofstream(dir_ / "outside" / "x.so") << "x";
  fs::create_symlink(dir_ / "outside" / "x.so", root_ / "m" / "lib" / "link.so");
  fs::create_symlink(root_ / "_shared" / "q.so", root_ / "m" / "lib" / "inside.so");
  // A --model NAME=PATH entry in the versions layout: PATH is its repository.
  fs::create_directories(dir_ / "entry" / "1");
  fs::create_directories(dir_ / "entry" / "lib");
  std::ofstream(dir_ / "entry" / "lib" / "e.so") << "x";
  auto r = Repository::Open(root_.string(), {{"e", (dir_ / "entry").string()}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto with = [&](const fs::path& dir, const std::string& plugins) {
    std::ofstream(dir / "model.json") << R"({"plugins": )" + plugins + "}";
  };
  const std::string real_root = fs::canonical(root_).string();
  with(root_ / "m",
       R"(["lib/p.so", "../_shared/q.so", "lib/inside.so", ")" + real_root + R"(/m/lib/p.so"])");
  auto ok = r->Config("m");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->plugins,
            (std::vector<std::string>{real_root + "/m/lib/p.so", real_root + "/_shared/q.so",
                                      real_root + "/_shared/q.so", real_root + "/m/lib/p.so"}));
  EXPECT_EQ(ok->policy.kind, VersionPolicy::Kind::kLatest);  // the file's other fields: none
  struct Bad {
    std::string plugins, want;
  };
  for (const Bad& b : std::vector<Bad>{
           {R"(["lib/p.so", "lib/missing.so"])",
            "m/model.json: \"plugins[1]\" is lib/missing.so: no such file"},
           {R"(["../../outside/x.so"])",
            "m/model.json: \"plugins[0]\" is ../../outside/x.so, which leaves the repository"},
           {R"(["lib/link.so"])", "\"plugins[0]\" is lib/link.so, which leaves the repository"},
           {R"([")" + (dir_ / "outside" / "x.so").string() + R"("])", "leaves the repository"},
           {R"(["lib"])", "\"plugins[0]\" is lib: not a file"},
           {R"([7])", "\"plugins[0]\" must be a non-empty string"}}) {
    with(root_ / "m", b.plugins);
    auto c = r->Config("m");
    ASSERT_FALSE(c.ok()) << b.plugins;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << b.plugins;
    EXPECT_NE(c.status().message().find(b.want), std::string::npos)
        << b.plugins << ": " << c.status().message();
  }
  // The entry: relative to PATH, and inside PATH (not the repository root).
  with(dir_ / "entry", R"(["lib/e.so"])");
  auto e = r->Config("e");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->plugins,
            (std::vector<std::string>{fs::canonical(dir_ / "entry" / "lib" / "e.so").string()}));
  with(dir_ / "entry", R"([")" + real_root + R"(/m/lib/p.so"])");
  auto out = r->Config("e");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("e/model.json: \"plugins[0]\""), std::string::npos)
      << out.status().message();
  EXPECT_NE(out.status().message().find("leaves the repository"), std::string::npos);
}

TEST_F(RepositoryTest, RefusesBadEntries) {
  EXPECT_FALSE(Repository::Open((dir_ / "none").string(), {}).ok());
  EXPECT_FALSE(Repository::Open("", {{"..", (dir_ / "single").string()}}).ok());
  EXPECT_FALSE(Repository::Open("", {{"s", (dir_ / "nothing").string()}}).ok());
  EXPECT_FALSE(
      Repository::Open("", {{"s", (dir_ / "single").string()}, {"s", (dir_ / "single").string()}})
          .ok());
  // A --model name that the repository also has.
  EXPECT_FALSE(Repository::Open(root_.string(), {{"m", (dir_ / "single").string()}}).ok());
}

}  // namespace
}  // namespace sluice::serving
