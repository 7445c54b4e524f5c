// A CLIP model served for image ranking and embeddings (docs/api.md, "Images"):
//   POST /v1/embeddings  input: a string, token ids, {"image": URL | data URI | path}, or a
//                        list of them (mixed); normalised by default ("normalize": false
//                        for the raw projections)
//   POST /v1/rerank      query (text) and documents (strings or {"image": ...}): cosine
//                        similarity of the query's and each document's embedding
// Images are fetched (media/fetch.h: parallel, SSRF guard, limits), decoded and processed
// in the server (media/), and their embeddings cached by the SHA-256 of their bytes
// (media/feature_cache.h); the whole path is server/clip_embedder.h (decode pool, vision
// batches gathered across requests, duplicates computed once).
//   POST /score, /v1/score  vLLM's shape: text_1/queries and text_2/documents (1:1, 1:N,
//                        N:N), items as above or vLLM content parts ({"content": [...]})
//   POST /plugins/NAME, /pooling {"io_processor": NAME, "data": ...}
//                        IO processors of plugins (SLUICE_TASK_CLIP, docs/plugins.md "Ranking
//                        heads on CLIP features"): the plugin's parse adds images and texts,
//                        the embedder embeds them (one call, in order), respond gets the
//                        L2-normalised embeddings (raw: the projections)
#pragma once

#include <memory>
#include <string>

#include "engine/plugins.h"
#include "server/clip_embedder.h"
#include "server/served_model.h"

namespace sluice::server {

struct ClipServeOptions {
  std::string name, version;
  ClipEmbedderOptions embedder;  // model, fetch, cache, decode pool, batching
  int max_inputs_per_request = 1000;
  int workers = 16;  // requests in progress at once (--image-workers)
  // Plugin libraries whose IO processors this model serves (each bound with task "clip";
  // kept loaded while the model is). Null: none.
  std::shared_ptr<const PluginSet> plugins;
};

// Whether `dir/config.json` names a CLIP architecture.
bool IsClipModelDirectory(const std::string& dir);

StatusOr<std::unique_ptr<ServedModel>> LoadClipServedModel(const ClipServeOptions& options);

}  // namespace sluice::server
