#pragma once

#include <gtest/gtest.h>

#include <string>

#include "structured/automaton.h"

namespace sluice::structured::testing {

inline std::shared_ptr<Dfa> DfaOf(const ExprP& e) {
  auto nfa = BuildNfa(e);
  EXPECT_TRUE(nfa.ok()) << nfa.status().message();
  return std::make_shared<Dfa>(*nfa, 200000);
}

}  // namespace sluice::structured::testing
