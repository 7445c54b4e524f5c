// `sluice embed|score` on a CLIP model directory: texts, token ids and images (local files,
// data: URIs, URLs under the server's SSRF guard) through server/clip_embedder.h, the path
// `sluice serve` runs (docs/cli.md, "CLIP models").
//
//   embed lines:  {"text": "..."} | {"input_ids": [...]} | {"image": SOURCE}
//                 -> {"index": i, "embedding": [...]} (L2-normalised unless --normalize off)
//   score lines:  {"query": Q, "document": D}, each a string, token ids, {"text": "..."} or
//                 {"image": SOURCE} -> {"index": i, "score": cosine similarity}
#pragma once

#include <string>

#include "cli/common.h"
#include "cli/image_flags.h"

namespace sluice::cli {

struct ClipOfflineFlags {
  ModelFlags model;
  ImageFlags image;
  std::string input, output = "-";
  std::string normalize = "auto";
  bool score = false;  // `sluice score`, else `sluice embed`
};

int RunClipOffline(const ClipOfflineFlags& f);

}  // namespace sluice::cli
