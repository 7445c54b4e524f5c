// Prints the tokens of SLUICE_TOK_TEXT with the tokenizer in SLUICE_TOK_DIR (debug helper;
// skipped unless both are set).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

TEST(TokenizerDebug, Print) {
  const char* dir = std::getenv("SLUICE_TOK_DIR");
  const char* text = std::getenv("SLUICE_TOK_TEXT");
  if (!dir || !text) GTEST_SKIP();
  auto t = Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto e = (*t)->Encode(text);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  for (size_t i = 0; i < e->size(); ++i) {
    std::printf("%d\t%s\t(%u,%u)\n", e->ids[i], e->tokens[i].c_str(), e->offsets[i].first,
                e->offsets[i].second);
  }
}

}  // namespace
}  // namespace sluice
