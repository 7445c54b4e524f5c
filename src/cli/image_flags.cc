#include "cli/image_flags.h"

namespace sluice::cli {

void AddImageFlags(CLI::App* sub, ImageFlags* f, bool offline) {
  if (offline) f->allowed_local_media_path = "/";
  f->options.clear();
  // Every flag registered here is kept in f->options (GivenImageFlags reads them).
  const auto keep = [f](CLI::Option* o) { f->options.push_back(o); };
  keep(sub->add_flag("--allow-private-media-urls", f->allow_private_media_urls,
                     "image URLs may resolve to loopback, private, link-local and other "
                     "internal addresses (refused by default: SSRF guard)"));
  keep(sub->add_option("--allowed-media-address", f->allowed_media_addresses,
                       "a numeric address (e.g. an internal image host 10.1.2.3) image URLs may "
                       "connect to although the SSRF guard refuses its range; repeatable"));
  keep(sub->add_option("--allowed-local-media-path", f->allowed_local_media_path,
                       offline ? "image inputs may name local files under this directory"
                               : "image inputs may name local files under this directory (default: "
                                 "none)")
           ->capture_default_str());
  keep(sub->add_option("--image-fetch-concurrency", f->image_fetch_concurrency,
                       "image downloads of one request in parallel")
           ->capture_default_str());
  keep(sub->add_option("--image-connect-timeout", f->image_connect_timeout_s,
                       "seconds to connect to an image host")
           ->capture_default_str());
  keep(sub->add_option("--image-fetch-timeout", f->image_fetch_timeout_s,
                       "seconds an image download may take in all")
           ->capture_default_str());
  keep(sub->add_option("--max-image-bytes", f->max_image_bytes, "bytes per image at most")
           ->capture_default_str());
  keep(sub->add_option("--image-cache-mb", f->image_cache_mb,
                       "image feature cache per model version, MiB, by content hash (0 = off)")
           ->capture_default_str());
  keep(sub->add_option("--image-decode", f->image_decode,
                       "exact: full-size decode as Hugging Face's processor; fast: JPEGs decoded "
                       "at a reduced size in the DCT domain (never below the resize target)")
           ->check(CLI::IsMember({"exact", "fast"}))
           ->capture_default_str());
  keep(sub->add_option("--max-image-pixels", f->max_image_pixels,
                       "decoded width x height per image at most, checked from the header "
                       "before any pixel memory is allocated")
           ->capture_default_str());
  keep(sub->add_option("--image-decode-threads", f->decode_threads,
                       "threads decoding and resizing images (0 = every core); at most this many "
                       "full-size images are decoded at once")
           ->capture_default_str());
  keep(sub->add_option("--max-image-batch", f->max_image_batch,
                       "images in one forward of the vision tower, gathered across requests (0 = "
                       "32 on CPU, 256 on CUDA)")
           ->capture_default_str());
  keep(sub->add_option("--max-queued-images", f->max_queued_images,
                       "pre-processed images waiting for the vision tower at most; requests "
                       "wait for room (0 = 4 x --max-image-batch)")
           ->capture_default_str());
  if (!offline) {
    keep(sub->add_option("--image-workers", f->image_workers,
                         "CLIP models: requests in progress at once (each waits on its downloads "
                         "and the batched forward)")
             ->capture_default_str());
  }
}

std::vector<std::string> GivenImageFlags(const ImageFlags& f) {
  std::vector<std::string> given;
  for (const CLI::Option* o : f.options) {
    if (o->count() > 0 && !o->get_lnames().empty()) given.push_back("--" + o->get_lnames()[0]);
  }
  return given;
}

Status CheckImageFlags(const ImageFlags& f) {
  if (f.image_fetch_concurrency < 1 || f.image_connect_timeout_s <= 0 ||
      f.image_fetch_timeout_s <= 0 || f.max_image_bytes < 1 || f.image_cache_mb < 0 ||
      f.max_image_pixels < 1 || f.image_workers < 1) {
    return InvalidArgument(
        "--image-fetch-concurrency, --image-connect-timeout, --image-fetch-timeout, "
        "--max-image-bytes, --max-image-pixels and --image-workers must be positive; "
        "--image-cache-mb >= 0");
  }
  if (f.decode_threads < 0 || f.max_image_batch < 0 || f.max_queued_images < 0) {
    return InvalidArgument(
        "--image-decode-threads, --max-image-batch and --max-queued-images must be >= 0 (0 = "
        "the default)");
  }
  return Status::Ok();
}

StatusOr<server::ClipEmbedderOptions> ToEmbedderOptions(const ImageFlags& f, const ModelFlags& mf) {
  RETURN_IF_ERROR(CheckImageFlags(f));
  ASSIGN_OR_RETURN(EngineOptions eo, ToEngineOptions(mf));
  server::ClipEmbedderOptions o;
  o.dir = mf.model;
  o.backend = eo.backend;
  o.dtype = eo.dtype.value_or(DType::kF32);
  o.fetch.allow_private = f.allow_private_media_urls;
  o.fetch.local_root = f.allowed_local_media_path;
  o.fetch.allowed_addresses = f.allowed_media_addresses;
  o.fetch.concurrency = f.image_fetch_concurrency;
  o.fetch.connect_timeout_ms = static_cast<int>(f.image_connect_timeout_s * 1000);
  o.fetch.total_timeout_ms = static_cast<int>(f.image_fetch_timeout_s * 1000);
  o.fetch.max_bytes = f.max_image_bytes;
  o.cache_bytes = static_cast<size_t>(f.image_cache_mb) << 20;
  o.fast_decode = f.image_decode == "fast";
  o.max_image_pixels = f.max_image_pixels;
  o.decode_threads = f.decode_threads;
  o.max_image_batch = f.max_image_batch;
  o.max_queued_images = f.max_queued_images;
  return o;
}

std::vector<std::string> ClipUnusedModelFlags(const ModelFlags& mf) {
  const ModelFlags d;  // the defaults
  std::vector<std::string> set;
  if (!mf.task.empty()) set.push_back("--task");
  if (mf.max_batch_tokens != d.max_batch_tokens) set.push_back("--max-batch-tokens");
  if (mf.max_num_seqs != d.max_num_seqs) set.push_back("--max-num-seqs");
  if (mf.prefix_reuse != d.prefix_reuse) set.push_back("--prefix-reuse");
  if (mf.cuda_graphs != d.cuda_graphs) set.push_back("--cuda-graphs");
  if (mf.cuda_graph_max_tokens != d.cuda_graph_max_tokens) set.push_back("--cuda-graph-max-tokens");
  if (mf.residual_dtype != d.residual_dtype) set.push_back("--residual-dtype");
  if (mf.batch_invariant) set.push_back("--batch-invariant");
  if (mf.profile) set.push_back("--profile");
  return set;
}

std::string JoinFlagNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace sluice::cli
