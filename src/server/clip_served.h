// A CLIP model served for image ranking and embeddings (docs/api.md, "Images"):
//   POST /v1/embeddings  input: a string, token ids, {"image": URL | data URI | path}, or a
//                        list of them (mixed); normalised by default ("normalize": false
//                        for the raw projections)
//   POST /v1/rerank      query (text) and documents (strings or {"image": ...}): cosine
//                        similarity of the query's and each document's embedding
// Images are fetched (media/fetch.h: parallel, SSRF guard, limits), decoded and processed
// in the server (media/), and their embeddings cached by the SHA-256 of their bytes
// (media/feature_cache.h); duplicates in one request are computed once. One request's images
// run as one batch (and its texts as another) on the model, which serves one request at a
// time.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "media/fetch.h"
#include "media/image.h"
#include "server/served_model.h"

namespace sluice::server {

struct ClipServeOptions {
  std::string name, version;
  std::string dir;
  BackendOptions backend;
  DType dtype = DType::kF32;
  media::FetchOptions fetch;
  size_t cache_bytes = 256 << 20;         // image feature cache (--image-cache-mb; 0 = none)
  bool fast_decode = false;               // --image-decode fast: JPEG DCT-domain downscaling
  int64_t max_image_pixels = 40'000'000;  // decoded width x height at most (--max-image-pixels)
  int max_inputs_per_request = 1000;
  int max_tokens_per_input = 0;  // 0: the text tower's max_position_embeddings
  int workers = 2;
};

// Whether `dir/config.json` names a CLIP architecture.
bool IsClipModelDirectory(const std::string& dir);

StatusOr<std::unique_ptr<ServedModel>> LoadClipServedModel(const ClipServeOptions& options);

}  // namespace sluice::server
