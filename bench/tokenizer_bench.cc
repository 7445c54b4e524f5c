// Single-thread tokenizer throughput: tokens/s and MB/s of sluice's Tokenizer::Encode over a
// corpus (default: the parity corpus). The HF side-by-side run is bench/peers (later).
// Usage: tokenizer_bench --model DIR [--corpus FILE.jsonl[.gz]] [--seconds S] [--pairs]
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> ReadCorpus(const std::string& path) {
  std::vector<std::string> out;
  bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::string cmd = (gz ? "gzip -dc '" : "cat '") + path + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
  pclose(f);
  simdjson::dom::parser parser;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) nl = data.size();
    std::string line = data.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    simdjson::dom::element e;
    if (parser.parse(line).get(e) != simdjson::SUCCESS) continue;
    std::string_view s;
    if (e.get(s) == simdjson::SUCCESS || e["text"].get(s) == simdjson::SUCCESS) out.emplace_back(s);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, corpus = "tests/fixtures/tokenizers/corpus.jsonl.gz";
  double seconds = 3.0;
  bool pairs = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--corpus" && i + 1 < argc)
      corpus = argv[++i];
    else if (a == "--seconds" && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (a == "--pairs")
      pairs = true;
    else {
      std::fprintf(stderr,
                   "usage: %s --model DIR [--corpus FILE.jsonl[.gz]] [--seconds S] [--pairs]\n",
                   argv[0]);
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "--model is required\n");
    return 2;
  }
  auto tok = sluice::Tokenizer::FromDirectory(model);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto texts = ReadCorpus(corpus);
  if (texts.empty()) {
    std::fprintf(stderr, "empty corpus %s\n", corpus.c_str());
    return 1;
  }
  size_t bytes_per_pass = 0;
  for (const auto& t : texts) bytes_per_pass += t.size();
  size_t tokens = 0, bytes = 0, passes = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t i = 0; i < texts.size(); ++i) {
      auto e = pairs ? (*tok)->EncodePair(texts[i], texts[(i * 7919) % texts.size()])
                     : (*tok)->Encode(texts[i]);
      if (!e.ok()) {
        std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
        return 1;
      }
      tokens += e->size();
    }
    bytes += bytes_per_pass;
    ++passes;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::printf("model=%s texts=%zu passes=%zu tokens=%zu seconds=%.2f tokens/s=%.0f MB/s=%.2f\n",
              model.c_str(), texts.size(), passes, tokens, elapsed, tokens / elapsed,
              bytes / elapsed / 1e6);
  return 0;
}
