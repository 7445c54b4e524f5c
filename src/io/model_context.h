// Builds the ModelContext the IO processors see from a loaded engine, its tokenizer
// (optional) and the server's request limits.
#pragma once

#include "engine/engine.h"
#include "sluice/io_processor.h"

namespace sluice::io {

struct ContextOptions {
  std::string served_name;
  std::string served_version = "1";
  int max_inputs_per_request = 0;  // 0 = unlimited
  int max_tokens_per_input = 0;    // 0 = the model's limit
  bool truncate = false;           // --truncate: over-long inputs are truncated
};

StatusOr<ModelContext> BuildModelContext(const Engine& engine, const Tokenizer* tokenizer,
                                         const ContextOptions& options);

}  // namespace sluice::io
