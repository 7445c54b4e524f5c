#pragma once

#include <gtest/gtest.h>

#include <string>

#include "structured/automaton.h"
#include "structured/pushdown.h"

namespace sluice::structured::testing {

inline std::shared_ptr<Dfa> DfaOf(const ExprP& e) {
  auto nfa = BuildNfa(e);
  EXPECT_TRUE(nfa.ok()) << nfa.status().message();
  EXPECT_FALSE(e->has_ref) << "a recursive expression: use LangOf";
  return std::make_shared<Dfa>(*nfa, 200000);
}

// The exact language of an expression, recursive or not (a Pda when it calls rules).
class Lang {
 public:
  explicit Lang(const ExprP& e) {
    auto nfa = BuildNfa(e, {}, /*pushdown=*/true);
    EXPECT_TRUE(nfa.ok()) << nfa.status().message();
    if (!nfa.ok()) return;
    if ((*nfa)->pushdown()) {
      EXPECT_TRUE(Pda::CheckLeftRecursion(**nfa).ok());
      pda_ = std::make_unique<Pda>(*nfa, 200000);
    } else {
      dfa_ = std::make_unique<Dfa>(*nfa, 200000);
    }
  }
  bool Matches(std::string_view s) {
    if (pda_) return pda_->Matches(s);
    return dfa_ && dfa_->Matches(s);
  }
  // Whether some string starting with s matches (the automaton is not dead after s).
  bool Continues(std::string_view s) {
    if (pda_) return pda_->Run(pda_->start(), s) >= 0;
    return dfa_ && dfa_->Run(dfa_->start(), s) >= 0;
  }
  bool pushdown() const { return pda_ != nullptr; }

 private:
  std::unique_ptr<Dfa> dfa_;
  std::unique_ptr<Pda> pda_;
};

inline std::shared_ptr<Lang> LangOf(const ExprP& e) { return std::make_shared<Lang>(e); }

}  // namespace sluice::structured::testing
