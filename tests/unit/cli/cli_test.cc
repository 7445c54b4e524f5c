// The `sluice` binary's offline commands end to end: outputs equal the golden fixtures,
// bad input gives a message naming the problem and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace {

namespace fs = std::filesystem;
const std::string kFixtures = SLUICE_FIXTURES_DIR;
const std::string kBinary = SLUICE_BINARY;

struct Result {
  int exit_code;
  std::string out;  // stdout + stderr
};

Result RunSluice(const std::string& args) {
  const std::string cmd = kBinary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A file name in this process's own temporary directory, removed with everything in it
// when the tests exit (earlier versions left every run's files in /tmp).
std::string TempPath(const std::string& name) {
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("sluice_cli_" + std::to_string(getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  return (dir.path / name).string();
}

// Writes the fixture's inputs as JSONL and returns the expected outputs.
std::vector<std::vector<double>> WriteInputs(const std::string& model, const std::string& path) {
  simdjson::dom::parser parser;
  auto doc = parser.load(kFixtures + "/golden/" + model + ".json");
  std::ofstream f(path);
  for (auto in : doc["inputs"].get_array()) {
    f << "{\"input_ids\":" << simdjson::minify(in["ids"]);
    simdjson::dom::array types;
    if (!in["type_ids"].get(types) && types.size() > 0) {
      f << ",\"token_type_ids\":" << simdjson::minify(in["type_ids"]);
    }
    f << "}\n";
  }
  std::vector<std::vector<double>> want;
  for (auto o : doc["outputs"].get_array()) {
    std::vector<double> v;
    for (auto x : o.get_array()) v.push_back(x.get_double());
    want.push_back(v);
  }
  return want;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(f, l)) lines.push_back(l);
  return lines;
}

// A copy of a BERT fixture model (symlinked files) with bert_uncased's tokenizer.json,
// its vocabulary cut to the model's 211 ids: the first 150 entries plus kWords (ids 150...).
const std::vector<std::string> kWords = {"the",  "cat",  "sat",   "on",    "mat", "sluice",
                                         "gate", "fish", "water", "dog",   "an",  "is",
                                         "what", "##s",  "##ing", "river", "open"};

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string MakeTextModel(const std::string& fixture = "bert_cross_encoder") {
  const fs::path dst = TempPath("text_model_" + fixture);
  fs::remove_all(dst);
  fs::create_directories(dst);
  const fs::path src = kFixtures + "/models/" + fixture;
  for (const auto& e : fs::directory_iterator(src)) {
    fs::create_symlink(fs::absolute(e.path()), dst / e.path().filename());
  }
  std::ifstream in(kFixtures + "/tokenizers/bert_uncased/tokenizer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(json);
  std::vector<std::pair<int64_t, std::string>> vocab;
  for (auto kv : doc["model"]["vocab"].get_object()) {
    vocab.emplace_back(kv.value.get_int64().value(), std::string(kv.key));
  }
  std::sort(vocab.begin(), vocab.end());
  std::string obj = "{";
  size_t id = 0;
  for (; id < 150; ++id)
    obj += (id ? "," : "") + JsonQuote(vocab[id].second) + ":" + std::to_string(id);
  for (const auto& w : kWords) obj += "," + JsonQuote(w) + ":" + std::to_string(id++);
  obj += "}";
  // Replace the text of model.vocab (the last "vocab" key; string-aware brace matching).
  const size_t key = json.rfind("\"vocab\"");
  size_t begin = json.find('{', key), end = begin;
  int depth = 0;
  bool in_str = false;
  for (; end < json.size(); ++end) {
    const char c = json[end];
    if (in_str) {
      if (c == '\\')
        ++end;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      break;
    }
  }
  std::ofstream(dst / "tokenizer.json") << json.substr(0, begin) << obj << json.substr(end + 1);
  return dst.string();
}

// Token ids of space-separated kWords.
std::string Ids(const std::string& text) {
  std::istringstream ss(text);
  std::string w, out;
  while (ss >> w) {
    const auto it = std::find(kWords.begin(), kWords.end(), w);
    if (it == kWords.end()) throw std::runtime_error("not a test word: " + w);
    out += (out.empty() ? "" : ",") + std::to_string(150 + (it - kWords.begin()));
  }
  return out;
}

std::string Outputs(const std::string& s) {
  const size_t p = s.find("{\"index\"");
  return p == std::string::npos ? s : s.substr(p);
}

TEST(Cli, TextInputsGiveTheScoresOfTheirTokenIds) {
  const std::string m = MakeTextModel();
  const std::string text = TempPath("text.jsonl"), ids = TempPath("text_ids.jsonl");
  const std::string q = "what is an cat", d1 = "the cat sat on the mat",
                    d2 = "open the sluice gate";
  std::ofstream(text) << "{\"query\":\"What is an CAT\",\"document\":\"" << d1 << "\"}\n"
                      << "{\"text\":\"" << q << "\",\"text_pair\":\"" << d2 << "\"}\n"
                      << "{\"text\":\"The cat sat\"}\n"
                      << "{\"input_ids\":[2," << Ids("fish water") << ",3]}\n";
  auto pair_line = [&](const std::string& a, const std::string& b) {
    const size_t na = std::count(a.begin(), a.end(), ' ') + 1,
                 nb = std::count(b.begin(), b.end(), ' ') + 1;
    std::string types = "0";
    for (size_t i = 0; i < na + 1; ++i) types += ",0";
    for (size_t i = 0; i < nb + 1; ++i) types += ",1";
    return "{\"input_ids\":[2," + Ids(a) + ",3," + Ids(b) + ",3],\"token_type_ids\":[" + types +
           "]}\n";
  };
  std::ofstream(ids) << pair_line(q, d1) << pair_line(q, d2) << "{\"input_ids\":[2,"
                     << Ids("the cat sat") << ",3]}\n"
                     << "{\"input_ids\":[2," << Ids("fish water") << ",3]}\n";
  auto a = RunSluice("score --threads 2 --model " + m + " --input " + text);
  auto b = RunSluice("score --model " + m + " --input " + ids);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(Outputs(a.out), Outputs(b.out));
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n') >= 4, true) << a.out;
}

TEST(Cli, OverLongTextIsRefusedUnlessTruncated) {
  const std::string m = MakeTextModel();
  const std::string in = TempPath("long_text.jsonl");
  std::string doc;
  for (int i = 0; i < 80; ++i) doc += i ? " fish" : "fish";
  std::ofstream(in) << "{\"text\":\"the cat\"}\n"
                    << "{\"query\":\"what is an cat\",\"document\":\"" << doc << "\"}\n";
  auto r = RunSluice("score --model " + m + " --input " + in);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find(in + ":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("limit of 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--truncate"), std::string::npos) << r.out;

  // --truncate cuts the document: the same as the first 64 ids, ending in [SEP].
  r = RunSluice("score --truncate --model " + m + " --input " + in);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string ids = TempPath("long_ids.jsonl");
  std::string line = "{\"input_ids\":[2," + Ids("what is an cat") + ",3";
  std::string types = "0,0,0,0,0,0";
  for (int i = 0; i < 64 - 7; ++i) {
    line += "," + Ids("fish");
    types += ",1";
  }
  line += ",3],\"token_type_ids\":[" + types + ",1]}\n";
  std::ofstream(ids) << "{\"input_ids\":[2," << Ids("the cat") << ",3]}\n" << line;
  auto want = RunSluice("score --model " + m + " --input " + ids);
  ASSERT_EQ(want.exit_code, 0) << want.out;
  EXPECT_EQ(Outputs(r.out), Outputs(want.out));

  // A model without a tokenizer: the error says so.
  r = RunSluice("score --model " + kFixtures + "/models/bert_cross_encoder --input " + in);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("tokenizer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(in + ":1"), std::string::npos) << r.out;
}

TEST(Cli, EmbedAndClassifyTextLikeTokenIds) {
  const std::string text = TempPath("ec_text.jsonl"), ids = TempPath("ec_ids.jsonl");
  std::ofstream(text) << "{\"text\":\"The river is open\"}\n{\"text\":\"fish\"}\n"
                      << "{\"text\":\"the dog sat on the mat\"}\n";
  std::ofstream(ids) << "{\"input_ids\":[2," << Ids("the river is open") << ",3]}\n"
                     << "{\"input_ids\":[2," << Ids("fish") << ",3]}\n"
                     << "{\"input_ids\":[2," << Ids("the dog sat on the mat") << ",3]}\n";
  for (const char* cmd : {"embed", "classify"}) {
    const std::string m =
        MakeTextModel(cmd == std::string("embed") ? "bert_st_mean_dense" : "bert_classifier3");
    auto a = RunSluice(std::string(cmd) + " --threads 3 --model " + m + " --input " + text);
    auto b = RunSluice(std::string(cmd) + " --model " + m + " --input " + ids);
    ASSERT_EQ(a.exit_code, 0) << cmd << "\n" << a.out;
    ASSERT_EQ(b.exit_code, 0) << cmd << "\n" << b.out;
    EXPECT_EQ(Outputs(a.out), Outputs(b.out)) << cmd;
    EXPECT_NE(Outputs(a.out).find("{\"index\":2"), std::string::npos) << a.out;
  }
}

TEST(Cli, ScoreMatchesGolden) {
  const std::string in = TempPath("score.jsonl"), out = TempPath("score.out");
  auto want = WriteInputs("bert_cross_encoder", in);
  auto r = RunSluice("score --model " + kFixtures + "/models/bert_cross_encoder --input " + in +
                     " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("done: 64 sequences"), std::string::npos) << r.out;
  auto lines = Lines(out);
  ASSERT_EQ(lines.size(), want.size());
  simdjson::dom::parser parser;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto doc = parser.parse(lines[i]);
    EXPECT_EQ(int64_t(doc["index"]), static_cast<int64_t>(i));
    EXPECT_NEAR(double(doc["score"]), want[i][0], 1e-4) << "line " << i;
  }
}

// --dtype int8: logged at start-up with the kernel on the linear layers (a warning where that
// is the portable kernel), scores within 1e-2 of the fixture's fp32 ones and not equal to
// them; refused for generation models.
TEST(Cli, ScoreInt8) {
  const std::string in = TempPath("score8.jsonl"), out = TempPath("score8.out");
  auto want = WriteInputs("bert_cross_encoder", in);
  auto r = RunSluice("score --model " + kFixtures + "/models/bert_cross_encoder --input " + in +
                     " --output " + out + " --dtype int8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("dtype int8 (linear layers int8 per-channel, activations quantised per "
                       "token)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("linear layers: int8 sluice-int8("), std::string::npos) << r.out;
  // The portable kernel (no AVX512-VNNI or AMX) is slower than f32: warned of, and only then.
  const bool portable = r.out.find("sluice-int8(portable)") != std::string::npos;
  EXPECT_EQ(r.out.find("int8 runs the portable kernel on this CPU") != std::string::npos, portable)
      << r.out;
  auto lines = Lines(out);
  ASSERT_EQ(lines.size(), want.size());
  simdjson::dom::parser parser;
  double worst = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto doc = parser.parse(lines[i]);
    worst = std::max(worst, std::fabs(double(doc["score"]) - want[i][0]));
  }
  EXPECT_LE(worst, 1e-2);
  EXPECT_GT(worst, 1e-6) << "int8 scores equal fp32: int8 did not run";
  const std::string gin = TempPath("gen8.jsonl");
  std::ofstream(gin) << "{\"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 2}\n";
  auto g = RunSluice("generate --model " + kFixtures + "/generation/qwen3/model --input " + gin +
                     " --output /dev/null --dtype int8");
  EXPECT_NE(g.exit_code, 0) << g.out;
  EXPECT_NE(g.out.find("--dtype int8 is for scoring models"), std::string::npos) << g.out;
}

TEST(Cli, EmbedWithDimensionsAndClassify) {
  const std::string in = TempPath("embed.jsonl"), out = TempPath("embed.out");
  auto want = WriteInputs("qwen3_st_last", in);
  auto r = RunSluice("embed --model " + kFixtures + "/models/qwen3_st_last --input " + in +
                     " --output " + out + " --dimensions 16");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  simdjson::dom::parser parser;
  auto lines = Lines(out);
  ASSERT_EQ(lines.size(), want.size());
  auto doc = parser.parse(lines[0]);
  auto emb = doc["embedding"].get_array();
  EXPECT_EQ(emb.size(), 16u);
  double ss = 0;
  for (auto x : emb) ss += double(x) * double(x);
  EXPECT_NEAR(ss, 1.0, 1e-5);

  const std::string cin = TempPath("cls.jsonl"), cout = TempPath("cls.out");
  auto cwant = WriteInputs("bert_classifier3", cin);
  r = RunSluice("classify --model " + kFixtures + "/models/bert_classifier3 --input " + cin +
                " --output " + cout);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto clines = Lines(cout);
  ASSERT_EQ(clines.size(), cwant.size());
  auto c0 = parser.parse(clines[0]);
  auto probs = c0["probs"].get_array();
  ASSERT_EQ(probs.size(), 3u);
  size_t best = 0, k = 0;
  double bestv = -1;
  for (auto p : probs) {
    EXPECT_NEAR(double(p), cwant[0][k], 1e-4);
    if (double(p) > bestv) bestv = double(p), best = k;
    ++k;
  }
  const char* names[] = {"neg", "neu", "pos"};
  EXPECT_EQ(std::string_view(c0["label"]), names[best]);
}

TEST(Cli, DimensionsOnlyForMatryoshkaModels) {
  // bert_st_mean_dense is not marked Matryoshka: --dimensions is refused, as the server's
  // `dimensions` is.
  const std::string in = TempPath("dims.jsonl"), out = TempPath("dims.out");
  WriteInputs("bert_st_mean_dense", in);
  auto r = RunSluice("embed --model " + kFixtures + "/models/bert_st_mean_dense --input " + in +
                     " --output " + out + " --dimensions 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--dimensions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Matryoshka"), std::string::npos) << r.out;
  // A copy of qwen3_st_last whose sluice.json lists the only dimensions allowed.
  const std::string dir = TempPath("matryoshka_model");
  fs::remove_all(dir);
  fs::copy(kFixtures + "/models/qwen3_st_last", dir, fs::copy_options::recursive);
  std::ofstream(dir + "/sluice.json") << R"({"matryoshka_dimensions": [8, 32]})";
  const std::string qin = TempPath("dims_q.jsonl");
  WriteInputs("qwen3_st_last", qin);
  r = RunSluice("embed --model " + dir + " --input " + qin + " --output " + out +
                " --dimensions 16");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("[8, 32]"), std::string::npos) << r.out;
  r = RunSluice("embed --model " + dir + " --input " + qin + " --output " + out +
                " --dimensions 8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  simdjson::dom::parser parser;
  auto lines = Lines(out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(parser.parse(lines[0])["embedding"].get_array().size(), 8u);
  fs::remove_all(dir);
}

TEST(Cli, PairsWithTemplateHeader) {
  const std::string in = TempPath("pairs.jsonl");
  std::ofstream(in) << "{\"prefix\":[2],\"separator\":[3],\"suffix\":[3]}\n"
                    << "{\"q\":[5,6,7],\"d\":[8,9]}\n";
  const std::string full = TempPath("full.jsonl");
  std::ofstream(full) << "{\"input_ids\":[2,5,6,7,3,8,9,3],\"token_type_ids\":[0,0,0,0,0,1,1,1]}\n";
  const std::string m = kFixtures + "/models/bert_cross_encoder";
  auto a = RunSluice("score --model " + m + " --input " + in);
  auto b = RunSluice("score --model " + m + " --input " + full);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  ASSERT_EQ(b.exit_code, 0) << b.out;
  auto score = [](const std::string& s) { return s.substr(s.find("{\"index\"")); };
  EXPECT_EQ(score(a.out), score(b.out));
}

TEST(Cli, ProfileBreakdown) {
  const std::string in = TempPath("prof.jsonl");
  WriteInputs("qwen3_reranker", in);
  auto r = RunSluice("score --profile --model " + kFixtures + "/models/qwen3_reranker --input " +
                     in + " --output /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* op : {"| Linear ", "| Attention |", "| RmsNorm |", "| QkNormRope |"}) {
    EXPECT_NE(r.out.find(op), std::string::npos) << op << "\n" << r.out;
  }
}

// Batch limits default per device (CPU here) and are logged; prefix reuse can be forced
// on the CPU (same scores) and bad values name the flag.
TEST(Cli, BatchLimitsAndPrefixReuseFlags) {
  const std::string in = TempPath("limits.jsonl");
  WriteInputs("qwen3_reranker", in);
  const std::string model = " --model " + kFixtures + "/models/qwen3_reranker --input " + in;
  auto d =
      RunSluice("score" + model + " --output " + TempPath("off.jsonl") + " --prefix-reuse off");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_NE(d.out.find("max_batch_tokens 8192, max_num_seqs 256"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("shared-prefix reuse: off"), std::string::npos) << d.out;
  auto on = RunSluice("score" + model + " --output " + TempPath("on.jsonl") +
                      " --prefix-reuse on --max-batch-tokens 4096 --max-num-seqs 7");
  ASSERT_EQ(on.exit_code, 0) << on.out;
  EXPECT_NE(on.out.find("max_batch_tokens 4096, max_num_seqs 7"), std::string::npos) << on.out;
  EXPECT_NE(on.out.find("shared-prefix reuse: on"), std::string::npos) << on.out;
  // Two score files with the same, non-empty lines.
  const auto expect_same_lines = [](const std::string& pa, const std::string& pb) {
    auto lines = [](const std::string& path) {
      std::ifstream f(path);
      std::vector<std::string> v;
      for (std::string l; std::getline(f, l);) v.push_back(l);
      return v;
    };
    const auto a = lines(pa), b = lines(pb);
    EXPECT_FALSE(a.empty()) << pa;
    EXPECT_EQ(a, b) << pa << " vs " << pb;
  };
  expect_same_lines(TempPath("off.jsonl"), TempPath("on.jsonl"));
  auto bad = RunSluice("score" + model + " --prefix-reuse sometimes");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--prefix-reuse"), std::string::npos) << bad.out;
  auto badr = RunSluice("score" + model + " --residual-dtype half");
  EXPECT_NE(badr.exit_code, 0);
  EXPECT_NE(badr.out.find("--residual-dtype"), std::string::npos) << badr.out;
  // On the CPU the activation dtype is f32: the same scores, and the startup log says that
  // the flag changed nothing.
  EXPECT_NE(d.out.find("residual stream: f32 (--residual-dtype f32)"), std::string::npos) << d.out;
  auto act = RunSluice("score" + model + " --output " + TempPath("act.jsonl") +
                       " --prefix-reuse off --residual-dtype activation");
  ASSERT_EQ(act.exit_code, 0) << act.out;
  EXPECT_NE(act.out.find("residual stream: f32: --residual-dtype activation has no effect here"),
            std::string::npos)
      << act.out;
  expect_same_lines(TempPath("act.jsonl"), TempPath("off.jsonl"));
  // A BERT-family model keeps its residual in the activation dtype whatever the flag says.
  const std::string bert_in = TempPath("limits_bert.jsonl");
  WriteInputs("bert_cross_encoder", bert_in);
  auto bert =
      RunSluice("score --model " + kFixtures + "/models/bert_cross_encoder --input " + bert_in +
                " --output " + TempPath("bert.jsonl") + " --residual-dtype activation");
  ASSERT_EQ(bert.exit_code, 0) << bert.out;
  EXPECT_NE(
      bert.out.find("--residual-dtype activation has no effect on BertForSequenceClassification"),
      std::string::npos)
      << bert.out;
  auto neg = RunSluice("score" + model + " --max-num-seqs -1");
  EXPECT_NE(neg.exit_code, 0);
  EXPECT_NE(neg.out.find("--max-num-seqs"), std::string::npos) << neg.out;
}

// Prefix reuse per group: a prompt prefix shared by every pair and queries repeated over
// consecutive documents; with reuse on, each query's documents form a group (they save
// more than the prefix alone over the whole batch), the log reports it, and the scores are
// those of the full computation, bit for bit.
TEST(Cli, PrefixReuseGroupsQueries) {
  const std::string in = TempPath("groups.jsonl");
  {
    std::ofstream f(in);
    f << "{\"prefix\": [11, 12, 13, 14, 15], \"suffix\": [16, 17]}\n";
    for (int q = 0; q < 3; ++q) {
      for (int d = 0; d < 4; ++d) {
        f << "{\"q\": [" << 100 + q << ", 21, 22, 23, 24, 25], \"d\": [" << 200 + d << ", "
          << 30 + q << ", 31]}\n";
      }
    }
  }
  const std::string model = " --model " + kFixtures + "/models/qwen3_reranker --input " + in;
  auto off =
      RunSluice("score" + model + " --output " + TempPath("g_off.jsonl") + " --prefix-reuse off");
  ASSERT_EQ(off.exit_code, 0) << off.out;
  EXPECT_EQ(off.out.find("groups in"), std::string::npos) << off.out;
  auto on =
      RunSluice("score" + model + " --output " + TempPath("g_on.jsonl") + " --prefix-reuse on");
  ASSERT_EQ(on.exit_code, 0) << on.out;
  // Per query: 3 groups x 3 x (5 + 6) = 99 tokens (the prefix alone: 11 x 5 = 55) of
  // 12 x 16 = 192.
  EXPECT_NE(on.out.find("shared-prefix reuse: 3 groups in 1 batches, 99 prefix tokens not "
                        "recomputed (51.6% of 192 tokens)"),
            std::string::npos)
      << on.out;
  const auto a = Lines(TempPath("g_off.jsonl")), b = Lines(TempPath("g_on.jsonl"));
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
}

// --batch-invariant is a CUDA option: on the CPU (batch invariant as built) it is refused,
// for scoring and generation alike, naming the flag.
TEST(Cli, BatchInvariantNeedsCuda) {
  const std::string in = TempPath("inv.jsonl");
  WriteInputs("qwen3_reranker", in);
  auto r = RunSluice("score --model " + kFixtures + "/models/qwen3_reranker --input " + in +
                     " --output /dev/null --batch-invariant");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-invariant needs --device cuda"), std::string::npos) << r.out;
  const std::string gin = TempPath("inv_gen.jsonl");
  {
    std::ofstream f(gin);
    f << "{\"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 2}\n";
  }
  auto g = RunSluice("generate --model " + kFixtures + "/generation/qwen3/model --input " + gin +
                     " --output /dev/null --batch-invariant");
  EXPECT_EQ(g.exit_code, 2) << g.out;
  EXPECT_NE(g.out.find("--batch-invariant needs --device cuda"), std::string::npos) << g.out;
}

// --cuda-graphs: off on the CPU (logged), `on` needs --device cuda, bad values name the flag.
TEST(Cli, CudaGraphsFlag) {
  const std::string in = TempPath("graphs.jsonl");
  WriteInputs("qwen3_reranker", in);
  const std::string model = " --model " + kFixtures + "/models/qwen3_reranker --input " + in;
  auto d = RunSluice("score" + model + " --output /dev/null");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_NE(d.out.find("CUDA graphs: off"), std::string::npos) << d.out;
  auto on = RunSluice("score" + model + " --cuda-graphs on");
  EXPECT_EQ(on.exit_code, 2) << on.out;
  EXPECT_NE(on.out.find("--cuda-graphs on needs --device cuda"), std::string::npos) << on.out;
  auto bad = RunSluice("score" + model + " --cuda-graphs always");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--cuda-graphs: expected auto, on or off"), std::string::npos) << bad.out;
  auto neg = RunSluice("score" + model + " --cuda-graph-max-tokens -5");
  EXPECT_EQ(neg.exit_code, 2) << neg.out;
  EXPECT_NE(neg.out.find("--cuda-graph-max-tokens"), std::string::npos) << neg.out;
}

TEST(Cli, Inspect) {
  auto r = RunSluice("inspect --model " + kFixtures + "/models/qwen3_reranker");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Qwen3ForCausalLM"), std::string::npos);
  EXPECT_NE(r.out.find("task:           score"), std::string::npos);
  EXPECT_NE(r.out.find("sigmoid(yes - no)"), std::string::npos);
  EXPECT_NE(r.out.find("parameters:"), std::string::npos);
}

TEST(Cli, BadInputsAreReportedNotCrashed) {
  const std::string m = kFixtures + "/models/bert_cross_encoder";
  const std::string bad = TempPath("bad.jsonl");
  std::ofstream(bad) << "{\"input_ids\":[1,2,3]}\n{\"input_ids\":[1,\"x\"]}\n";
  auto r = RunSluice("score --model " + m + " --input " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;

  std::ofstream(bad) << "{\"input_ids\":[1,2,999999]}\n";
  r = RunSluice("score --model " + m + " --input " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("999999"), std::string::npos) << r.out;

  std::ofstream long_in(bad);
  long_in << "{\"input_ids\":[";
  for (int i = 0; i < 100; ++i) long_in << (i ? "," : "") << 5;
  long_in << "]}\n";
  long_in.close();
  r = RunSluice("score --model " + m + " --input " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("limit of 64"), std::string::npos) << r.out;

  std::ofstream(bad) << "{not json\n";
  r = RunSluice("score --model " + m + " --input " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("invalid JSON"), std::string::npos) << r.out;

  r = RunSluice("score --model /nonexistent --input " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("/nonexistent"), std::string::npos) << r.out;

  r = RunSluice("score --model " + m + " --input " + bad + " --dtype float8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--dtype"), std::string::npos) << r.out;
}

// sluice generate: greedy output equal to Hugging Face generate (the qwen3 fixture, fp32),
// the output line format, text prompts, and errors naming the field and the numbers.
TEST(Cli, GenerateMatchesHfAndWritesTheDocumentedLines) {
  const std::string dir = kFixtures + "/generation/qwen3";
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(dir + "/expected.json");
  const std::string in = TempPath("gen.jsonl"), out = TempPath("gen.out.jsonl");
  std::vector<std::vector<int64_t>> want;
  {
    std::ofstream f(in);
    for (auto p : doc["prompts"].get_array()) {
      f << "{\"prompt_token_ids\":" << simdjson::minify(p)
        << ",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":2}\n";
    }
    for (auto g : doc["greedy"].get_array()) {
      std::vector<int64_t> t;
      for (auto x : g["tokens"].get_array()) t.push_back(x.get_int64());
      t.resize(12);
      want.push_back(t);
    }
  }
  auto r = RunSluice("generate --model " + dir + "/model --input " + in + " --output " + out +
                     " --max-num-seqs 3 --max-num-batched-tokens 32");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("TTFT p50"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inter-token latency p50"), std::string::npos) << r.out;
  const auto lines = Lines(out);
  ASSERT_EQ(lines.size(), want.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    simdjson::dom::parser lp;
    simdjson::dom::element o = lp.parse(lines[i]);
    EXPECT_EQ(o["index"].get_int64().value(), static_cast<int64_t>(i));
    EXPECT_EQ(std::string(o["finish_reason"].get_string().value()), "length");
    std::vector<int64_t> got;
    for (auto x : o["token_ids"].get_array()) got.push_back(x.get_int64());
    EXPECT_EQ(got, want[i]) << "prompt " << i;
    // logprobs: one object per generated token, the chosen token's id first, <= 3 entries.
    size_t steps = 0;
    for (auto step : o["logprobs"].get_array()) {
      simdjson::dom::object obj = step.get_object();
      EXPECT_GE(obj.size(), 2u);
      EXPECT_LE(obj.size(), 3u);
      EXPECT_EQ(std::string((*obj.begin()).key), std::to_string(got[steps]));
      EXPECT_LE((*obj.begin()).value.get_double().value(), 0.0);
      ++steps;
    }
    EXPECT_EQ(steps, got.size());
  }

  // A text prompt through the model's tokenizer; n = 2 gives two completion lines.
  std::ofstream(in) << "{\"prompt\":\"hello world\",\"max_tokens\":3,\"n\":2,\"temperature\":0.8,"
                       "\"seed\":7}\n";
  r = RunSluice("generate --model " + dir + "/model --input " + in + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto text_lines = Lines(out);
  ASSERT_EQ(text_lines.size(), 2u);
  for (size_t c = 0; c < 2; ++c) {
    simdjson::dom::parser lp;
    simdjson::dom::element o = lp.parse(text_lines[c]);
    EXPECT_EQ(o["completion"].get_int64().value(), static_cast<int64_t>(c));
    EXPECT_GT(o["prompt_tokens"].get_int64().value(), 0);
    EXPECT_EQ(o["token_ids"].get_array().size(), 3u);
    EXPECT_FALSE(o["text"].error()) << text_lines[c];
  }
}

TEST(Cli, GenerateRefusesBadRequestsNamingTheProblem) {
  const std::string m = kFixtures + "/generation/qwen3/model";
  const std::string in = TempPath("genbad.jsonl");
  auto run = [&](const std::string& line, const std::string& flags = "") {
    std::ofstream(in) << line << "\n";
    return RunSluice("generate --model " + m + " --input " + in + " --output - " + flags);
  };
  struct Case {
    std::string line, flags, needle;
  };
  const Case cases[] = {
      {R"({"prompt_token_ids":[5,6],"best_of":3})", "", "best_of"},
      {R"({"prompt_token_ids":[5,6],"temperature":-1})", "", "temperature"},
      {R"({"prompt_token_ids":[5,6],"top_p":1.5})", "", "top_p"},
      {R"({"prompt_token_ids":[5,6],"n":0})", "", "n must be in"},
      {R"({"prompt_token_ids":[5,6],"max_tokens":100})", "--max-model-len 64", "64"},
      {R"({"prompt_token_ids":[5,99999999]})", "", "99999999"},
      {R"({"prompt":"a","prompt_token_ids":[1]})", "", "exactly one"},
      {R"({"max_tokens":3})", "", "exactly one"},
      {R"({"prompt_token_ids":[5,6]})", "--enable-prefix-caching maybe", "--enable-prefix-caching"},
      {R"({"prompt_token_ids":[5,6]})", "--kv-cache-memory 1000", "KV"},
      {R"({"prompt_token_ids":[5,6]})", "--structured-cache-mb 0", "--structured-cache-mb"},
      // Flags that would do nothing on CPU are refused, not ignored.
      {R"({"prompt_token_ids":[5,6]})", "--cuda-graphs on", "--cuda-graphs on needs --device cuda"},
      {R"({"prompt_token_ids":[5,6]})", "--gpu-memory-utilization 0.5",
       "--gpu-memory-utilization sizes the KV cache from CUDA device memory"},
      {R"({"prompt_token_ids":[5,6]})", "--gpu-memory-utilization 1.5", "must be in (0, 1]"},
  };
  for (const Case& c : cases) {
    auto r = run(c.line, c.flags);
    EXPECT_NE(r.exit_code, 0) << c.line;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.line << " " << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("{\"index\""), std::string::npos) << "generated despite: " << c.line;
  }
}

TEST(Cli, GrammarBenchChecksMasksAgainstTheReferenceWalk) {
  const std::string schemas = TempPath("schemas.jsonl");
  {
    std::ofstream f(schemas);
    f << R"({"id":"free","schema":{},"tests":[{"valid":true,"data":{"a":[1,{"b":"x"}]}}]})"
      << "\n";
    f << R"({"id":"obj","schema":{"type":"object","properties":{"name":{"type":"string"}},)"
         R"("required":["name"]},"tests":[{"valid":true,"data":{"name":"Ann","k":[true]}},)"
         R"({"valid":false,"data":{"k":1}}]})"
      << "\n";
  }
  const std::string tok = kFixtures + "/../../models/demo-chat";
  Result r =
      RunSluice("grammar-bench --tokenizer " + tok + " --schemas " + schemas + " --check-masks");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"mask_mismatches\":0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"valid_rejected\":0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"invalid_accepted\":0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("masks_checked\":0,"), std::string::npos) << r.out;
  const std::string results = TempPath("results.jsonl");
  r = RunSluice("grammar-bench --tokenizer " + tok + " --schemas " + schemas + " --output " +
                results);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("mask_mismatches"), std::string::npos) << r.out;
  // The refused instance {"k":1} says where: its byte offset, the text before the refused
  // token (a prefix of the instance) and the token.
  std::ifstream in(results);
  std::string line, obj;
  while (std::getline(in, line)) {
    if (line.find("\"id\":\"obj\"") != std::string::npos) obj = line;
  }
  EXPECT_NE(obj.find("\"rejected_offset\":"), std::string::npos) << obj;
  const size_t b = obj.find("\"before\":\"");
  ASSERT_NE(b, std::string::npos) << obj;
  EXPECT_EQ(obj.compare(b + 10, 3, "{\\\""), 0) << obj;  // the JSON-quoted text starts {"
  EXPECT_NE(obj.find("\"token\":\""), std::string::npos) << obj;
  fs::remove(results);
  fs::remove(schemas);
}

// --random-walks: generations drawn uniformly among the allowed tokens; every mask checked
// against the reference walk and every state reached must allow some token. The pattern with
// maxLength once let a walk into a state with no allowed token (a "\" where no "/" fits).
TEST(Cli, GrammarBenchRandomWalksFindNoDeadEnds) {
  const std::string schemas = TempPath("walk_schemas.jsonl");
  {
    std::ofstream f(schemas);
    f << R"({"id":"scoped","schema":{"type":"object","properties":{"n":{"type":"string",)"
         R"("pattern":"^@[a-z]+/[a-z]+$","maxLength":6}},"required":["n"]},"tests":[]})"
      << "\n";
  }
  const std::string tok = kFixtures + "/../../models/demo-chat";
  Result r = RunSluice("grammar-bench --tokenizer " + tok + " --schemas " + schemas +
                       " --random-walks 200 --walk-tokens 40 --check-masks");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"dead_ends\":0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"mask_mismatches\":0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"walks\":{\"per_schema\":200"), std::string::npos) << r.out;
  fs::remove(schemas);
}

// --walk-threads: the same generations on 4 threads against one grammar (a closed object with
// maxLength strings: near-bound masks walked under the grammar's shared lock); every mask still
// equals the reference walk's, no dead end, and as many masks as on one thread.
TEST(Cli, GrammarBenchWalkThreadsShareOneGrammar) {
  const std::string schemas = TempPath("walk_threads_schemas.jsonl");
  {
    std::ofstream f(schemas);
    f << R"({"id":"closed","schema":{"type":"object","properties":{"name":{"type":"string",)"
         R"("maxLength":30},"tags":{"type":"array","items":{"type":"string","maxLength":8},)"
         R"("maxItems":3}},"required":["name","tags"],"additionalProperties":false},"tests":[]})"
      << "\n";
  }
  const std::string tok = kFixtures + "/../../models/demo-chat";
  std::string masks[2];
  for (int i = 0; i < 2; ++i) {
    Result r = RunSluice("grammar-bench --tokenizer " + tok + " --schemas " + schemas +
                         " --random-walks 64 --walk-tokens 48 --check-masks --walk-threads " +
                         (i ? "4" : "1"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"dead_ends\":0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"mask_mismatches\":0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(i ? "\"threads\":4" : "\"threads\":1"), std::string::npos) << r.out;
    const size_t at = r.out.find("\"walks\":{\"per_schema\":64,\"masks\":");
    ASSERT_NE(at, std::string::npos) << r.out;
    masks[i] = r.out.substr(at, r.out.find(',', at + 30) - at);
  }
  EXPECT_EQ(masks[0], masks[1]);  // the same generations (seeded per walk), the same masks
  fs::remove(schemas);
}

// --no-counted-sharing: every position of a maxLength string is walked apart; by default the
// positions far from the bound share one mask (fewer walks), and the masks are the same.
TEST(Cli, GrammarBenchCountedSharingWalksFewerMasks) {
  const std::string schemas = TempPath("counted_schemas.jsonl");
  {
    std::ofstream f(schemas);
    f << R"({"id":"long","schema":{"type":"string","maxLength":400},"tests":[{"valid":true,)"
         R"("data":")"
      << std::string(300, 'x') << R"("}]})"
      << "\n";
  }
  const std::string tok = kFixtures + "/../../models/demo-chat";
  auto walks = [&](const std::string& flag) {
    Result r = RunSluice("grammar-bench --tokenizer " + tok + " --schemas " + schemas +
                         " --check-masks " + flag);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"mask_mismatches\":0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"valid_accepted\":1"), std::string::npos) << r.out;
    const size_t at = r.out.find("\"mask_walks\":");
    return at == std::string::npos ? -1L : std::stol(r.out.substr(at + 13));
  };
  const long shared = walks(""), apart = walks("--no-counted-sharing");
  EXPECT_GT(shared, 0) << shared;
  EXPECT_LT(shared * 2, apart) << shared << " vs " << apart;
  fs::remove(schemas);
}

}  // namespace
