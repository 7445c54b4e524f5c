// The built-in IO processors and the routes they serve:
//   embed:    POST /v1/embeddings (OpenAI), /embed (TEI), /pooling (vLLM)
//   classify: POST /classify (vLLM), /predict (TEI)
//   score:    POST /score (vLLM), /v1/rerank (Cohere/Jina), /rerank (Cohere/Jina, or TEI
//             when the body has "texts")
//   tokenize: POST /tokenize, /detokenize (vLLM)
#pragma once

#include <map>
#include <memory>
#include <string>

#include "sluice/io_processor.h"

namespace sluice::io {

enum class EmbedFlavor { kOpenAI, kTei, kPooling };
enum class ClassifyFlavor { kVllm, kTei };
enum class ScoreFlavor { kScore, kRerank };

std::unique_ptr<IoProcessor> MakeEmbedProcessor(EmbedFlavor flavor);
std::unique_ptr<IoProcessor> MakeClassifyProcessor(ClassifyFlavor flavor);
std::unique_ptr<IoProcessor> MakeScoreProcessor(ScoreFlavor flavor);
std::unique_ptr<IoProcessor> MakeTokenizeProcessor(bool detokenize);

// Route -> processor for every built-in route. Const after construction.
class ProcessorRegistry {
 public:
  ProcessorRegistry();
  const IoProcessor* Find(const std::string& route) const;
  const std::map<std::string, std::unique_ptr<IoProcessor>>& routes() const { return routes_; }

 private:
  std::map<std::string, std::unique_ptr<IoProcessor>> routes_;
};

// Response helpers shared by the built-ins.
std::string NewResponseId(const char* prefix);  // "embd-1f3a..."
int64_t UnixSeconds();

}  // namespace sluice::io
