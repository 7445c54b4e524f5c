// The built-in IO processors, by name (io/registry.h registers them; the names are reserved),
// and the routes they serve:
//   embeddings      POST /v1/embeddings (OpenAI)
//   embed           POST /embed (TEI)
//   pooling         POST /pooling (vLLM; without "io_processor")
//   classify        POST /classify (vLLM)
//   predict         POST /predict (TEI)
//   score           POST /score, /v1/score (vLLM)
//   rerank          POST /v1/rerank, /rerank (Cohere/Jina, or TEI when the body has "texts")
//   rerank-v2       POST /v2/rerank (Cohere v2)
//   token-classify  POST /token-classify (the Hugging Face token-classification pipeline)
//   absa            POST /absa (aspect-based sentiment, sluice.json "absa")
//   tokenize        POST /tokenize (vLLM)
//   detokenize      POST /detokenize (vLLM)
// Each is also reachable as POST /plugins/NAME and /pooling with "io_processor": NAME.
#pragma once

#include <memory>
#include <string>

#include "io/registry.h"
#include "sluice/io_processor.h"

namespace sluice::io {

enum class EmbedFlavor { kOpenAI, kTei, kPooling };
enum class ClassifyFlavor { kVllm, kTei };
enum class ScoreFlavor { kScore, kRerank, kCohereV2 };

std::unique_ptr<IoProcessor> MakeEmbedProcessor(EmbedFlavor flavor);
std::unique_ptr<IoProcessor> MakeClassifyProcessor(ClassifyFlavor flavor);
std::unique_ptr<IoProcessor> MakeScoreProcessor(ScoreFlavor flavor);
std::unique_ptr<IoProcessor> MakeTokenizeProcessor(bool detokenize);
std::unique_ptr<IoProcessor> MakeTokenClassifyProcessor();
std::unique_ptr<IoProcessor> MakeAbsaProcessor();

// FailedPrecondition unless the model classifies tokens and has its tokenizer.
Status CheckTokenClassifier(const ModelContext& m);

// Response helpers shared by the built-ins.
std::string NewResponseId(const char* prefix);  // "embd-1f3a..."
int64_t UnixSeconds();

class JsonWriter;

// The response envelope of the OpenAI/vLLM-style routes, written in two halves around the
// caller's items:
//   {"id": "<prefix>-...", "object": "list", "created": <unix s>, "model": "<name>", "data": [
//   ... ], "usage": {"prompt_tokens": n, "total_tokens": n}}
// Cohere/Jina rerank has no object/created, its items under "results" and only
// "total_tokens" in usage.
enum class Envelope { kList, kListWithCompletion, kRerank };
void BeginResponse(JsonWriter& w, Envelope kind, const char* id_prefix, const std::string& model);
void EndResponse(JsonWriter& w, Envelope kind, int64_t prompt_tokens);

}  // namespace sluice::io
