// The image-input flags of CLIP models (docs/api.md "Images"), shared by `sluice serve` and
// the offline commands (`sluice embed|score` on a CLIP directory).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/common.h"
#include "server/clip_embedder.h"

namespace sluice::cli {

struct ImageFlags {
  bool allow_private_media_urls = false;
  std::string allowed_local_media_path;
  std::vector<std::string> allowed_media_addresses;  // numeric addresses the guard lets through
  int image_fetch_concurrency = 8;
  double image_connect_timeout_s = 5;
  double image_fetch_timeout_s = 20;
  int64_t max_image_bytes = 32 << 20;
  int64_t image_cache_mb = 256;
  std::string image_decode = "exact";
  int64_t max_image_pixels = 40'000'000;
  int decode_threads = 0;     // 0: every core
  int max_image_batch = 0;    // 0: 32 on CPU, 256 on CUDA
  int max_queued_images = 0;  // 0: 4 x the batch
  int image_workers = 16;     // serve: CLIP requests in progress at once
  // The image flags given on the command line (GivenImageFlags, after parsing): they must
  // reach a CLIP model.
  std::vector<std::string> given;
  // The options AddImageFlags registered (owned by the command's CLI::App), in order.
  std::vector<const CLI::Option*> options;
};

// offline: the commands read local files by default (--allowed-local-media-path "/").
void AddImageFlags(CLI::App* app, ImageFlags* f, bool offline);
Status CheckImageFlags(const ImageFlags& f);
// The image flags (AddImageFlags registered them in f.options) given on the command line,
// as "--name" in registration order.
std::vector<std::string> GivenImageFlags(const ImageFlags& f);
// The embedder's options for model directory `mf.model` (device, dtype, threads from mf).
// The other settings of `mf` are the text engine's: see ClipUnusedModelFlags.
StatusOr<server::ClipEmbedderOptions> ToEmbedderOptions(const ImageFlags& f, const ModelFlags& mf);
// The flags of `mf` set away from their defaults that a CLIP model does not use (the text
// engine's batching, graphs, profiling, task, residual dtype), as "--name" in flag order: a
// CLIP model batches images by --max-image-batch and queues them by --max-queued-images.
std::vector<std::string> ClipUnusedModelFlags(const ModelFlags& mf);
// "--a, --b".
std::string JoinFlagNames(const std::vector<std::string>& names);

}  // namespace sluice::cli
