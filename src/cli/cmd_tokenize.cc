// `sluice tokenize --model DIR TEXT [--pair TEXT2]`: prints ids, tokens and byte offsets.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "engine/model_bundle.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string text;
  std::string pair;
  bool has_pair = false;
  bool no_special = false;
  size_t max_length = 0;
  std::string strategy = "longest_first";
  bool decode = false;
};

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int RunTokenize(const TokenizeFlags& f) {
  if (Status s = CheckModelDirectory(f.model); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  auto tok = Tokenizer::FromDirectory(f.model);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().ToString().c_str());
    return 2;
  }
  TruncationParams tp;
  const TruncationParams* trunc = nullptr;
  if (f.max_length > 0) {
    tp.max_length = f.max_length;
    if (f.strategy == "only_first") {
      tp.strategy = TruncationStrategy::kOnlyFirst;
    } else if (f.strategy == "only_second") {
      tp.strategy = TruncationStrategy::kOnlySecond;
    } else if (f.strategy != "longest_first") {
      std::fprintf(stderr, "error: unknown --strategy '%s'\n", f.strategy.c_str());
      return 2;
    }
    trunc = &tp;
  }
  auto enc = f.has_pair ? (*tok)->EncodePair(f.text, f.pair, !f.no_special, trunc)
                        : (*tok)->Encode(f.text, !f.no_special, trunc);
  if (!enc.ok()) {
    std::fprintf(stderr, "error: %s\n", enc.status().ToString().c_str());
    return 1;
  }
  std::printf("%zu tokens (vocab %zu)\n", enc->size(), (*tok)->vocab_size());
  std::printf("%5s %8s %4s %3s %-13s %-24s %s\n", "#", "id", "type", "sp", "offsets", "token",
              "text[offsets]");
  for (size_t i = 0; i < enc->size(); ++i) {
    auto [s, e] = enc->offsets[i];
    const std::string& src = enc->sequence_ids[i] == 1 ? f.pair : f.text;
    std::string span;
    if (enc->sequence_ids[i] >= 0 && s <= e && e <= src.size()) span = src.substr(s, e - s);
    char off[32];
    std::snprintf(off, sizeof(off), "(%u,%u)", s, e);
    std::printf("%5zu %8d %4d %3d %-13s %-24s %s\n", i, enc->ids[i], enc->type_ids[i],
                static_cast<int>(enc->special_tokens_mask[i]), off,
                Printable(enc->tokens[i]).c_str(), Printable(span).c_str());
  }
  std::printf("ids:");
  for (int32_t id : enc->ids) std::printf(" %d", id);
  std::printf("\n");
  if (f.decode) {
    auto d = (*tok)->Decode(enc->ids, true);
    if (d.ok()) std::printf("decoded: %s\n", Printable(*d).c_str());
  }
  return 0;
}

Registrar tokenize_cmd(Command{
    "tokenize",
    "Tokenize TEXT (or a pair) with a model directory's tokenizer; prints ids, tokens, offsets",
    [](CLI::App* sub) {
      auto f = std::make_shared<TokenizeFlags>();
      sub->add_option("--model", f->model, "Model directory (tokenizer.json or vocab.txt)")
          ->required();
      sub->add_option("text", f->text,
                      "Text to tokenize (a text starting with '-' goes after --: "
                      "sluice tokenize --model DIR -- -text)")
          ->required();
      sub->footer(
          "A text that starts with '-' would be read as an option: put it after --, e.g.\n"
          "  sluice tokenize --model DIR -- \"-5 degrees\"");
      sub->add_option("--pair", f->pair, "Second text of a pair")->each([f](const std::string&) {
        f->has_pair = true;
      });
      sub->add_flag("--no-special", f->no_special, "Do not add special tokens");
      sub->add_option("--max-length", f->max_length, "Truncate to this many tokens (0: off)");
      sub->add_option("--strategy", f->strategy,
                      "longest_first|only_first|only_second (with --max-length)");
      sub->add_flag("--decode", f->decode, "Also print the decoded ids");
      return [f, sub] {
        if (sub->count("--strategy") > 0 && f->max_length == 0) {
          std::fprintf(stderr, "error: --strategy truncates: it needs --max-length\n");
          return 2;
        }
        return RunTokenize(*f);
      };
    }});

}  // namespace
}  // namespace sluice::cli
