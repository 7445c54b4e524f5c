// The inputs of a golden fixture (tests/fixtures/golden/<name>.json: "inputs", each with
// "ids", optional "type_ids" and "attended": TokenSequence::attended), shared by the golden test
// and the engine/CUDA tests that run the fixture models.
#pragma once

#include <simdjson.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace sluice::testing {

inline std::vector<TokenSequence> GoldenInputs(simdjson::dom::element doc) {
  std::vector<TokenSequence> v;
  for (auto in : doc["inputs"].get_array()) {
    TokenSequence s;
    for (auto id : in["ids"].get_array()) s.ids.push_back(static_cast<int32_t>(id.get_int64()));
    simdjson::dom::array types;
    if (!in["type_ids"].get(types)) {
      for (auto t : types) s.type_ids.push_back(static_cast<int32_t>(t.get_int64()));
    }
    int64_t attended;
    if (!in["attended"].get(attended)) s.attended = static_cast<int32_t>(attended);
    v.push_back(std::move(s));
  }
  return v;
}

// The backend under test: SLUICE_TEST_DEVICE=cuda selects CUDA, anything else the CPU.
inline DeviceKind TestDevice() {
  const char* d = std::getenv("SLUICE_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
}

// The inputs of fixture `name` under `fixtures` (the fixtures directory).
inline std::vector<TokenSequence> GoldenInputs(const std::string& fixtures,
                                               const std::string& name) {
  simdjson::dom::parser parser;
  return GoldenInputs(parser.load(fixtures + "/golden/" + name + ".json"));
}

}  // namespace sluice::testing
