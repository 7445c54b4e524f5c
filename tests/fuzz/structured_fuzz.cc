// libFuzzer target over the structured-output compilers (src/structured): arbitrary bytes as a
// regex (full-match or search), a JSON Schema or a GBNF grammar, compiled under small automaton
// limits (recursive ones on the pushdown automaton). Checks: no crash, hang or unbounded memory;
// every refusal is an InvalidArgument or ResourceExhausted Status with a message; for what
// compiles, the token mask over a small byte vocabulary agrees with stepping the automaton token by
// token (a token is in the mask iff Advance does not die; EOS iff accepting), and matching is
// deterministic.
//
// Input layout: byte 0 selects the compiler (% 4: regex full, regex search, schema, grammar);
// the rest is the source text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/token_mask.h"

namespace {

using namespace sluice::structured;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "structured_fuzz invariant violated: %s\n", what);
  std::abort();
}
#define CHECK_INV(cond)       \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (0)

std::shared_ptr<const TokenTrie> Vocab() {
  static const std::shared_ptr<const TokenTrie> trie = [] {
    std::vector<std::optional<std::string>> toks;
    for (int b = 0; b < 256; ++b) toks.emplace_back(std::string(1, static_cast<char>(b)));
    for (const char* t :
         {"{\"", "\":", "\",\"", "true", "null", "ab", "\xc3\xa9", "12", " ", "\\n", "SELECT "}) {
      toks.emplace_back(t);
    }
    const int eos = static_cast<int>(toks.size());
    return TokenTrie::Build(toks, eos + 1, {eos});
  }();
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  sluice::StatusOr<ExprP> e = sluice::InvalidArgument("unset");
  switch (mode) {
    case 0:
      e = ParseRegex(text, RegexMode::kFullMatch);
      break;
    case 1:
      e = ParseRegex(text, RegexMode::kSearch);
      break;
    case 2:
      e = CompileJsonSchema(text, {});
      break;
    default:
      e = CompileGrammar(text);
      break;
  }
  if (!e.ok()) {
    CHECK_INV(!e.status().message().empty());
    return 0;
  }
  CompileLimits limits;
  limits.max_nfa_states = 200000;
  limits.max_dfa_states = 5000;
  auto g = Grammar::Create(*e, Vocab(), limits);
  if (!g.ok()) {
    // Too large, or (recursive constraints) left recursion.
    CHECK_INV(g.status().code() == sluice::StatusCode::kResourceExhausted ||
              g.status().code() == sluice::StatusCode::kInvalidArgument);
    CHECK_INV(!g.status().message().empty());
    return 0;
  }
  Grammar& gr = **g;
  const TokenTrie& t = gr.trie();
  std::vector<uint32_t> mask(static_cast<size_t>(t.words()));
  // Walk: at each step the mask agrees with Advance; follow the first allowed non-EOS token
  // chosen by the input bytes.
  int32_t s = gr.start();
  std::string walked;
  for (size_t step = 0; step < 24 && s >= 0; ++step) {
    if (!gr.FillMask(s, mask.data()).ok()) return 0;
    int first = -1;
    for (int id = 0; id < t.vocab_size(); ++id) {
      const bool in = (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1;
      if (t.IsEos(id)) {
        CHECK_INV(in == gr.Accepting(s));
        continue;
      }
      const int32_t n = gr.Advance(s, id);
      CHECK_INV(in == (n >= 0));
      if (in && (first < 0 || (static_cast<size_t>(id) % 7 == data[step % size] % 7))) first = id;
    }
    if (first < 0) break;
    walked += *t.bytes(first);
    s = gr.Advance(s, first);
  }
  if (s >= 0) {
    const bool a = gr.Accepting(s);
    CHECK_INV(gr.Matches(walked) == a);
    CHECK_INV(gr.Matches(walked) == a);
  }
  return 0;
}
