// Parity with Python jinja2 in transformers' environment: every case of
// tests/fixtures/chat_templates/cases.json (written by tests/golden/generate_chat_templates.py)
// rendered by sluice must equal jinja2's output byte for byte, or fail where jinja2 failed
// (with raise_exception's message where jinja2 raised one).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "chat/template.h"

#ifndef SLUICE_FIXTURES_DIR
#error "SLUICE_FIXTURES_DIR must name tests/fixtures"
#endif

namespace sluice::chat {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::tm FixtureNow() {  // generate_chat_templates.py's NOW: 2024-07-26 14:05:09, a Friday
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  return tm;
}

TEST(ChatTemplateParity, EveryFixtureCaseMatchesJinja2) {
  const std::string text =
      ReadFile(std::string(SLUICE_FIXTURES_DIR) + "/chat_templates/cases.json");
  ASSERT_FALSE(text.empty());
  auto doc = ParseJson(text);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const Value* templates = doc->dict->Find(Value::Str("templates"));
  const Value* cases = doc->dict->Find(Value::Str("cases"));
  ASSERT_TRUE(templates && cases);

  std::map<std::string, StatusOr<Template>> parsed;
  RenderOptions opts;
  opts.now = FixtureNow();
  int identical = 0, errors_matched = 0, total = 0;
  for (const Value& c : cases->list->items) {
    ++total;
    const std::string name = c.dict->Find(Value::Str("name"))->s;
    const std::string tname = c.dict->Find(Value::Str("template"))->s;
    auto it = parsed.find(tname);
    if (it == parsed.end()) {
      it =
          parsed.emplace(tname, Template::Parse(templates->dict->Find(Value::Str(tname))->s)).first;
    }
    StatusOr<std::string> got = it->second.ok()
                                    ? it->second->Render(*c.dict->Find(Value::Str("context")), opts)
                                    : StatusOr<std::string>(it->second.status());
    if (const Value* expected = c.dict->Find(Value::Str("output"))) {
      if (!got.ok()) {
        ADD_FAILURE() << name << ": jinja2 rendered, sluice failed: " << got.status().ToString();
        continue;
      }
      if (*got != expected->s) {
        ADD_FAILURE() << name << ":\n--- jinja2\n" << expected->s << "\n--- sluice\n" << *got;
        continue;
      }
      ++identical;
    } else {
      const std::string err = c.dict->Find(Value::Str("error"))->s;
      if (got.ok()) {
        ADD_FAILURE() << name << ": jinja2 failed (" << err << "), sluice rendered:\n" << *got;
        continue;
      }
      EXPECT_NE(got.status().message().find("line "), std::string::npos)
          << name << ": " << got.status().ToString();
      static const std::string kRaised = "TemplateError: ";
      if (err.rfind(kRaised, 0) == 0) {  // raise_exception: the message must come through
        const std::string msg = err.substr(kRaised.size());
        if (got.status().message().find(msg) == std::string::npos) {
          ADD_FAILURE() << name << ": expected message '" << msg << "' in "
                        << got.status().ToString();
          continue;
        }
      }
      ++errors_matched;
    }
  }
  std::printf(
      "chat template parity: %d/%d identical outputs, %d expected errors reproduced, %d cases\n",
      identical, total, errors_matched, total);
  EXPECT_EQ(identical + errors_matched, total);
  EXPECT_GE(identical + errors_matched, 300);
}

}  // namespace
}  // namespace sluice::chat
