// The path from a CLIP request's inputs to their embeddings, shared by the server
// (server/clip_served.h) and the offline commands (`sluice embed|score` on a CLIP directory):
//
//   texts   tokenised on the caller's thread, then run as one packed batch
//   images  fetched (media/fetch.h: parallel, SSRF guard, limits), hashed (SHA-256 of the
//           bytes), looked up in the feature cache, decoded and pre-processed on a bounded
//           decode pool (--image-decode-threads), then embedded by the vision tower in
//           batches that gather the images of concurrent requests (--max-image-batch)
//
// One engine thread owns the model: it takes the queued work in arrival order, images of
// several requests into one forward of at most max_image_batch images, texts as one packed
// batch per request. The queue is bounded (max_queued_images pre-processed images waiting;
// a caller blocks until its images fit), the decode pool holds at most decode_threads
// decoded full-size images at a time, so memory stays bounded however many requests arrive.
//
// Duplicates: an image (by content hash) is computed once per request, and an image that a
// concurrent request is already computing is waited for, not computed again ("single
// flight"), so every copy of an image gets the same features; a row's features do not depend
// on the batch it ran in (no padding), and the cache returns exactly what was computed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/recycle_pool.h"
#include "media/feature_cache.h"
#include "media/fetch.h"
#include "media/image.h"
#include "media/preprocess.h"
#include "models/clip.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

// One input: a text (string or token ids) or an image source (URL, data URI, local path).
struct ClipItem {
  bool image = false;
  std::string text;          // the text, or the image source
  std::vector<int32_t> ids;  // token ids (a text given as ids)
  bool has_ids = false;
  std::string path;  // where it came from, for errors ("input[2]", "in.jsonl:3")
};

struct ClipEmbedderOptions {
  std::string dir;
  BackendOptions backend;
  DType dtype = DType::kF32;
  media::FetchOptions fetch;
  size_t cache_bytes = 256 << 20;         // image feature cache (0 = none)
  bool fast_decode = false;               // JPEG DCT-domain downscaling
  int64_t max_image_pixels = 40'000'000;  // decoded width x height at most
  int max_tokens_per_input = 0;           // 0: the text tower's max_position_embeddings
  int decode_threads = 0;                 // image decode pool (0: every core)
  int max_image_batch = 0;                // images per vision forward (0: 32 CPU, 256 CUDA)
  int max_queued_images = 0;              // pre-processed images waiting (0: 4 x batch)
};

class ClipEmbedder {
 public:
  static StatusOr<std::unique_ptr<ClipEmbedder>> Load(const ClipEmbedderOptions& options);
  ~ClipEmbedder();

  const ClipModel& model() const { return *model_; }
  const ClipEmbedderOptions& options() const { return o_; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null: token ids only
  // Tokens one text may have: max_tokens_per_input, else the text tower's positions (0: no
  // text tower).
  int max_text_tokens() const;
  std::string Describe() const;  // for the start-up log

  // Projected, unnormalised embeddings of the items, in order ([n, projection_dim]).
  // *tokens: text tokens used. Errors name the item's path (and an image's source).
  // Thread-safe: many callers at once share the decode pool and the model's batches.
  Status Embed(const std::vector<ClipItem>& items, std::vector<float>* out, int64_t* tokens);
  Status WarmUp();
  // sluice_image_* counters and gauges with the given label set ("model=...,version=...").
  std::string RenderMetrics(const std::string& labels) const;
  // The vision tower's work so far: images embedded, forwards, and the engine's time in them
  // (upload, forward, results): images / forward_seconds is the model's own rate.
  struct VisionStats {
    uint64_t images = 0, forwards = 0;
    double forward_seconds = 0;
  };
  VisionStats vision_stats() const {
    return {embedded_.load(), forwards_.load(), static_cast<double>(forward_ns_.load()) * 1e-9};
  }

  static void Normalize(float* v, int n);

  // Tests: hold the engine thread (work queues up but does not run), and wait until at
  // least `queued_images` images are queued, `blocked` callers wait for queue space and
  // `queued_texts` text jobs (one per caller with texts) are queued.
  void HoldForTest(bool hold);
  void WaitForTest(int64_t queued_images, int blocked, int queued_texts = 0);

 private:
  struct Job;
  struct Flight;
  class DecodePool;
  ClipEmbedder(ClipEmbedderOptions o, std::unique_ptr<Backend> backend,
               std::unique_ptr<ClipModel> model, std::unique_ptr<Tokenizer> tokenizer,
               media::ImageProcessorConfig processor);
  Status EmbedImages(const std::vector<ClipItem>& items, const std::vector<size_t>& rows,
                     std::vector<float>* out);
  // Queues a job for the engine thread (blocking while the queue is full).
  void Submit(const std::shared_ptr<Job>& job);
  void Wait(const std::shared_ptr<Job>& job);
  void EngineLoop();
  // A job's pixel buffer of n values: a finished job's (pages already mapped, kept_pixels_)
  // where one fits, else a new one.
  std::vector<float> TakePixels(size_t n);
  // One forward of the text tower for these text jobs (their texts in order).
  void RunTexts(const std::vector<std::shared_ptr<Job>>& texts);
  static constexpr int64_t kMaxTextsPerForward = 256;

  const ClipEmbedderOptions o_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ClipModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const media::ImageProcessorConfig processor_;
  media::DecodeOptions decode_;
  media::MediaFetcher fetcher_;
  media::FeatureCache cache_;
  int max_batch_ = 0, max_queued_ = 0;
  std::unique_ptr<DecodePool> decode_pool_;

  // Images being computed, by content hash (single flight).
  std::mutex flights_mu_;
  std::map<media::Digest, std::shared_ptr<Flight>> flights_;
  std::condition_variable flights_cv_;

  // Finished jobs' pixel buffers, 64 MiB at most.
  RecyclePool<std::vector<float>> kept_pixels_{size_t{64} << 20, size_t{1} << 20};

  // The engine thread's queue.
  std::mutex mu_;
  std::condition_variable cv_, space_cv_, done_cv_, test_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_images_ = 0;
  int blocked_ = 0;  // callers waiting for queue space
  bool stop_ = false, hold_ = false;
  std::thread engine_;

  std::atomic<uint64_t> fetched_{0}, fetch_failures_{0}, embedded_{0}, forwards_{0}, coalesced_{0};
  std::atomic<uint64_t> forward_ns_{0};  // engine thread inside the vision forwards
  std::atomic<uint64_t> text_forwards_{0};
};

}  // namespace sluice::server
