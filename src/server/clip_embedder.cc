#include "server/clip_embedder.h"

#include <malloc.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/log.h"
#include "core/thread_pool.h"
#include "io/json.h"

namespace sluice::server {

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Shorten(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 77) + "..."; }

}  // namespace

// Work for the engine thread: one request's texts, or a run of one request's images.
struct ClipEmbedder::Job {
  bool text = false;
  std::vector<std::vector<int32_t>> ids;  // text
  std::vector<float> pixels;              // images: n x patch_values_per_image
  int64_t n = 0;                          // images (or texts)
  int64_t taken = 0;                      // images handed to a forward so far
  int64_t finished = 0;                   // images whose features are in `out`
  std::vector<float> out;                 // [n, projection_dim]
  Status status;
  bool done = false;
};

// The features of one image being computed by some request, for every request that wants it.
struct ClipEmbedder::Flight {
  bool done = false;
  Status status;  // a decode error: the message alone (each waiter names its own input)
  bool decode_error = false;
  std::vector<float> value;
};

// A fixed pool of decode threads; RunAll(n, fn) runs fn(0..n-1) on it and waits. At most
// `threads` decodes (full-size images) are in memory at once, whatever the callers.
class ClipEmbedder::DecodePool {
 public:
  explicit DecodePool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~DecodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }
  void RunAll(size_t n, const std::function<void(size_t)>& fn) {
    if (n == 0) return;
    struct Latch {
      std::mutex mu;
      std::condition_variable cv;
      size_t left;
    };
    auto latch = std::make_shared<Latch>();
    latch->left = n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < n; ++i) {
        tasks_.push_back([latch, &fn, i] {
          fn(i);
          std::lock_guard<std::mutex> l(latch->mu);
          if (--latch->left == 0) latch->cv.notify_all();
        });
      }
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> l(latch->mu);
    latch->cv.wait(l, [&] { return latch->left == 0; });
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

ClipEmbedder::ClipEmbedder(ClipEmbedderOptions o, std::unique_ptr<Backend> backend,
                           std::unique_ptr<ClipModel> model, std::unique_ptr<Tokenizer> tokenizer,
                           media::ImageProcessorConfig processor)
    : o_(std::move(o)),
      backend_(std::move(backend)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      processor_(processor),
      fetcher_(o_.fetch),
      cache_(o_.cache_bytes) {
  decode_.max_pixels = o_.max_image_pixels;
  if (o_.fast_decode) media::SetFastDecodeBounds(processor_, &decode_);
  max_batch_ = o_.max_image_batch > 0                   ? o_.max_image_batch
               : o_.backend.device == DeviceKind::kCuda ? 256
                                                        : 32;
  max_queued_ = o_.max_queued_images > 0 ? o_.max_queued_images : 4 * max_batch_;
  decode_pool_ = std::make_unique<DecodePool>(
      o_.decode_threads > 0 ? o_.decode_threads : ThreadPool::HardwareThreads());
  engine_ = std::thread([this] { EngineLoop(); });
}

ClipEmbedder::~ClipEmbedder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    hold_ = false;
  }
  cv_.notify_all();
  engine_.join();
}

std::string ClipEmbedder::Describe() const {
  return "decode " + std::string(o_.fast_decode ? "fast" : "exact") + " on " +
         std::to_string(decode_pool_->size()) + " threads (max " +
         std::to_string(o_.max_image_pixels) + " pixels), vision batches of up to " +
         std::to_string(max_batch_) + " images across requests, at most " +
         std::to_string(max_queued_) + " images queued";
}

void ClipEmbedder::Normalize(float* v, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(v[i]) * v[i];
  const double norm = std::sqrt(s);
  if (norm > 0) {
    for (int i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] / norm);
  }
}

void ClipEmbedder::Submit(const std::shared_ptr<Job>& job) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!job->text) {
      // A run larger than the whole bound goes alone (callers split runs at max_batch_).
      if (!(queued_images_ == 0 || queued_images_ + job->n <= max_queued_)) {
        ++blocked_;
        test_cv_.notify_all();
        space_cv_.wait(lock, [&] {
          return stop_ || queued_images_ == 0 || queued_images_ + job->n <= max_queued_;
        });
        --blocked_;
      }
      queued_images_ += job->n;
    }
    queue_.push_back(job);
  }
  cv_.notify_all();
  test_cv_.notify_all();
}

void ClipEmbedder::Wait(const std::shared_ptr<Job>& job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return job->done; });
}

void ClipEmbedder::EngineLoop() {
  const int P = model_->projection_dim();
  const int64_t per = model_->has_vision() ? model_->patch_values_per_image() : 0;
  struct Piece {
    std::shared_ptr<Job> job;
    int64_t begin, count;
  };
  for (;;) {
    std::vector<Piece> pieces;
    std::vector<std::shared_ptr<Job>> texts;
    int64_t total = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ || !queue_.empty()) && !hold_; });
      if (queue_.empty()) return;
      if (queue_.front()->text) {
        // Every queued text job (the queries of several requests) in one forward of the text
        // tower, ahead of the images queued between them: texts are short, and a forward of
        // a few tokens costs mostly its launches.
        int64_t n = 0;
        for (auto it = queue_.begin(); it != queue_.end() && n < kMaxTextsPerForward;) {
          if ((*it)->text) {
            n += (*it)->n;
            texts.push_back(*it);
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
      } else {
        // Images of consecutive image jobs (several requests), up to max_batch_.
        while (!queue_.empty() && !queue_.front()->text && total < max_batch_) {
          const std::shared_ptr<Job>& j = queue_.front();
          const int64_t take = std::min<int64_t>(j->n - j->taken, max_batch_ - total);
          pieces.push_back({j, j->taken, take});
          j->taken += take;
          total += take;
          if (j->taken == j->n) queue_.pop_front();
        }
        queued_images_ -= total;
      }
    }
    space_cv_.notify_all();
    if (!texts.empty()) {
      RunTexts(texts);
      continue;
    }
    // The jobs' patch rows are uploaded where they lie (the decode threads wrote them in the
    // patch embedding's layout): between two forwards this thread copies nothing on the host.
    std::vector<ClipModel::PatchSpan> spans;
    for (const Piece& p : pieces) spans.push_back({p.job->pixels.data() + p.begin * per, p.count});
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<std::vector<float>> emb = model_->EmbedPatches(spans);
    forward_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    forwards_++;
    embedded_ += static_cast<uint64_t>(total);
    bool several = false;
    for (const Piece& p : pieces) several = several || p.job != pieces[0].job;
    if (several) coalesced_++;
    std::lock_guard<std::mutex> lock(mu_);
    int64_t at = 0;
    for (const Piece& p : pieces) {
      Job& j = *p.job;
      if (emb.ok()) {
        std::copy_n(emb->data() + at * P, p.count * P, j.out.data() + p.begin * P);
      } else {
        j.status = emb.status();
      }
      at += p.count;
      j.finished += p.count;
      if (j.finished == j.n) {
        j.done = true;
        kept_pixels_.Keep(std::move(j.pixels));
        std::vector<float>().swap(j.pixels);
      }
    }
    done_cv_.notify_all();
  }
}

void ClipEmbedder::RunTexts(const std::vector<std::shared_ptr<Job>>& texts) {
  const int P = model_->projection_dim();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& t : texts) ids.insert(ids.end(), t->ids.begin(), t->ids.end());
  StatusOr<std::vector<float>> emb = model_->EmbedTexts(ids);
  text_forwards_++;
  if (!emb.ok() && texts.size() > 1) {
    // One request's texts failed the forward (a token id outside the vocabulary): each job
    // alone, so that the error reaches that request only and names its own text.
    for (const auto& t : texts) RunTexts({t});
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t at = 0;
  for (const auto& t : texts) {
    if (emb.ok()) {
      t->out.assign(emb->begin() + static_cast<int64_t>(at) * P,
                    emb->begin() + static_cast<int64_t>(at + t->ids.size()) * P);
    } else {
      t->status = emb.status();
    }
    at += t->ids.size();
    t->done = true;
  }
  done_cv_.notify_all();
}

std::vector<float> ClipEmbedder::TakePixels(size_t n) {
  std::vector<float> v;
  kept_pixels_.Take(n * sizeof(float), &v);
  v.assign(n, 0.f);
  return v;
}

int ClipEmbedder::max_text_tokens() const {
  if (!model_->has_text()) return 0;
  return o_.max_tokens_per_input > 0 ? o_.max_tokens_per_input
                                     : model_->text_config().max_position_embeddings;
}

Status ClipEmbedder::Embed(const std::vector<ClipItem>& items, std::vector<float>* out,
                           int64_t* tokens) {
  const int P = model_->projection_dim();
  out->assign(items.size() * P, 0.f);
  std::vector<size_t> text_rows, image_rows;
  auto text_job = std::make_shared<Job>();
  text_job->text = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const ClipItem& it = items[i];
    if (it.image) {
      if (!model_->has_vision()) {
        return io::FieldError(it.path, "is an image; this model has no vision tower");
      }
      image_rows.push_back(i);
      continue;
    }
    if (!model_->has_text()) {
      return io::FieldError(it.path, "is a text; this model has no text tower");
    }
    std::vector<int32_t> ids = it.ids;
    if (!it.has_ids) {
      if (!tokenizer_) {
        return io::FieldError(it.path,
                              "is a text, but this model has no tokenizer.json: give token ids");
      }
      auto enc = tokenizer_->Encode(it.text, true);
      if (!enc.ok()) return io::FieldError(it.path, enc.status().message());
      ids = std::move(enc->ids);
    }
    const int limit = max_text_tokens();
    if (ids.empty()) return io::FieldError(it.path, "has no tokens");
    if (static_cast<int>(ids.size()) > limit) {
      return io::FieldError(it.path, "has " + std::to_string(ids.size()) + " tokens; at most " +
                                         std::to_string(limit));
    }
    *tokens += static_cast<int64_t>(ids.size());
    text_rows.push_back(i);
    text_job->ids.push_back(std::move(ids));
  }
  // The texts run while the images are fetched and decoded.
  text_job->n = static_cast<int64_t>(text_job->ids.size());
  if (text_job->n > 0) Submit(text_job);
  Status images = image_rows.empty() ? Status::Ok() : EmbedImages(items, image_rows, out);
  if (text_job->n > 0) {
    Wait(text_job);
    if (!text_job->status.ok()) return text_job->status;
    for (size_t t = 0; t < text_rows.size(); ++t) {
      std::copy_n(text_job->out.data() + t * P, P, out->data() + text_rows[t] * P);
    }
  }
  return images;
}

Status ClipEmbedder::EmbedImages(const std::vector<ClipItem>& items,
                                 const std::vector<size_t>& rows, std::vector<float>* out) {
  const int P = model_->projection_dim();
  // Each image's values in the patch embedding's layout (ClipModel::patch_values_per_image).
  const int64_t per = model_->patch_values_per_image();
  const int side = model_->vision_config().image_size;
  const int patch = model_->vision_config().patch_size;
  std::vector<std::string> sources;
  for (size_t r : rows) sources.push_back(items[r].text);
  std::vector<StatusOr<std::string>> bytes = fetcher_.FetchAll(sources);
  const size_t n = sources.size();
  // Per source: cached features, a flight it waits for (own or another request's).
  std::vector<media::Digest> digests(n);
  std::vector<std::vector<float>> cached(n);
  std::vector<bool> hit(n, false);
  std::vector<std::shared_ptr<Flight>> flight(n);
  std::vector<size_t> own;  // sources this request computes (distinct digests)
  for (size_t j = 0; j < n; ++j) {
    if (!bytes[j].ok()) {
      fetch_failures_++;
      return io::FieldError(items[rows[j]].path + ".image", bytes[j].status().message());
    }
  }
  // The hashes (~2 ms per 4 MB photo) on the decode pool, side by side: in series they were
  // ~20 ms of a 10-photo request's latency before any decode could start.
  if (n > 1) {
    decode_pool_->RunAll(n, [&](size_t j) { digests[j] = media::Sha256(*bytes[j]); });
  } else if (n == 1) {
    digests[0] = media::Sha256(*bytes[0]);
  }
  for (size_t j = 0; j < n; ++j) {
    fetched_++;
    bool dup = false;
    for (size_t k = 0; k < j && !dup; ++k) {
      if (digests[k] == digests[j] && (hit[k] || flight[k])) {
        hit[j] = hit[k];
        cached[j] = cached[k];
        flight[j] = flight[k];
        dup = true;
      }
    }
    if (dup) continue;
    if (cache_.Get(digests[j], &cached[j])) {
      hit[j] = true;
      continue;
    }
    std::lock_guard<std::mutex> lock(flights_mu_);
    auto f = flights_.find(digests[j]);
    if (f != flights_.end()) {
      flight[j] = f->second;  // another request computes it
      continue;
    }
    // Put before a flight ends, under flights_mu_: look again now that no flight is running.
    if (cache_.Get(digests[j], &cached[j])) {
      hit[j] = true;
      continue;
    }
    flight[j] = std::make_shared<Flight>();
    flights_.emplace(digests[j], flight[j]);
    own.push_back(j);
  }

  // Decode and pre-process the own images in runs of at most max_batch_ on the decode pool;
  // each run is queued for the engine as soon as it is ready, while the next one decodes.
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::vector<size_t>> job_sources;
  std::vector<std::string> decode_error(n);
  for (size_t b = 0; b < own.size(); b += static_cast<size_t>(max_batch_)) {
    const size_t e = std::min(own.size(), b + static_cast<size_t>(max_batch_));
    // Each image's pixel values go straight to its row of the job (one allocation per run:
    // appending per-image vectors grew it by doubling, into fresh pages each time).
    auto job = std::make_shared<Job>();
    job->pixels = TakePixels((e - b) * static_cast<size_t>(per));
    std::vector<char> ok(e - b, 0);  // one byte each: the decode threads write them at once
    decode_pool_->RunAll(e - b, [&](size_t i) {
      const size_t j = own[b + i];
      auto img = media::DecodeImage(*bytes[j], decode_);
      if (!img.ok()) {
        decode_error[j] = img.status().message();
        return;
      }
      const media::Image sized = media::ResizeAndCrop(*img, processor_);
      if (sized.width != side || sized.height != side) {
        decode_error[j] = "the image processor's output size (" + std::to_string(sized.width) +
                          "x" + std::to_string(sized.height) +
                          ") does not match the vision tower's input (" + std::to_string(side) +
                          "x" + std::to_string(side) + ")";
        return;
      }
      media::NormalizePatches(sized, processor_, patch,
                              job->pixels.data() + i * static_cast<size_t>(per));
      ok[i] = 1;
    });
    std::vector<size_t> srcs;
    for (size_t i = 0; i < e - b; ++i) {
      const size_t j = own[b + i];
      fetcher_.Recycle(std::move(*bytes[j]));  // the bytes are no longer needed
      std::string().swap(*bytes[j]);
      if (!ok[i]) continue;
      const size_t row = srcs.size();  // failed images leave no row
      if (row != i) {
        std::copy_n(job->pixels.begin() + i * static_cast<size_t>(per), per,
                    job->pixels.begin() + row * static_cast<size_t>(per));
      }
      srcs.push_back(j);
    }
    job->pixels.resize(srcs.size() * static_cast<size_t>(per));
    job->n = static_cast<int64_t>(srcs.size());
    if (job->n == 0) continue;
    job->out.assign(static_cast<size_t>(job->n * P), 0.f);
    Submit(job);
    jobs.push_back(job);
    job_sources.push_back(std::move(srcs));
  }
  // Own results: into the cache, then to the waiters.
  for (size_t k = 0; k < jobs.size(); ++k) {
    Wait(jobs[k]);
    const Job& job = *jobs[k];
    for (size_t t = 0; t < job_sources[k].size(); ++t) {
      const size_t j = job_sources[k][t];
      std::vector<float> v(job.out.begin() + t * P, job.out.begin() + (t + 1) * P);
      if (job.status.ok()) cache_.Put(digests[j], v);
      std::lock_guard<std::mutex> lock(flights_mu_);
      flight[j]->status = job.status;
      flight[j]->value = std::move(v);
      flight[j]->done = true;
      flights_.erase(digests[j]);
    }
  }
  for (size_t j : own) {
    if (decode_error[j].empty()) continue;
    std::lock_guard<std::mutex> lock(flights_mu_);
    flight[j]->status = InvalidArgument(decode_error[j]);
    flight[j]->decode_error = true;
    flight[j]->done = true;
    flights_.erase(digests[j]);
  }
  flights_cv_.notify_all();
  // Every copy: from the cache or its flight (own, or another request's).
  for (size_t j = 0; j < n; ++j) {
    const ClipItem& it = items[rows[j]];
    const float* src = cached[j].data();
    if (!hit[j]) {
      std::unique_lock<std::mutex> lock(flights_mu_);
      flights_cv_.wait(lock, [&] { return flight[j]->done; });
      if (!flight[j]->status.ok()) {
        if (flight[j]->decode_error) {
          return io::FieldError(it.path + ".image",
                                Shorten(sources[j]) + ": " + flight[j]->status.message());
        }
        return flight[j]->status;
      }
      src = flight[j]->value.data();
    }
    std::copy_n(src, P, out->data() + rows[j] * P);
  }
  return Status::Ok();
}

Status ClipEmbedder::WarmUp() {
  if (model_->has_vision()) {
    auto job = std::make_shared<Job>();
    job->n = 1;
    job->pixels.assign(static_cast<size_t>(model_->patch_values_per_image()), 0.f);
    job->out.assign(static_cast<size_t>(model_->projection_dim()), 0.f);
    Submit(job);
    Wait(job);
    RETURN_IF_ERROR(job->status);
    forwards_ = 0;
    embedded_ = 0;
    forward_ns_ = 0;
  }
  if (model_->has_text()) {
    auto job = std::make_shared<Job>();
    job->text = true;
    job->ids = {{model_->text_config().eos_token_id}};
    job->n = 1;
    Submit(job);
    Wait(job);
    RETURN_IF_ERROR(job->status);
    text_forwards_ = 0;
  }
  return Status::Ok();
}

std::string ClipEmbedder::RenderMetrics(const std::string& l) const {
  std::string s;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
         "{" + l + "} " + std::to_string(v) + "\n";
  };
  counter("sluice_image_cache_hits_total", "Image features served from the feature cache.",
          cache_.hits());
  counter("sluice_image_cache_misses_total", "Image features computed (not in the cache).",
          cache_.misses());
  counter("sluice_images_fetched_total", "Images fetched or decoded from data URIs and files.",
          fetched_.load());
  counter("sluice_image_fetch_failures_total", "Image sources that could not be fetched.",
          fetch_failures_.load());
  counter("sluice_images_embedded_total", "Images run through the vision tower.", embedded_.load());
  counter("sluice_image_forwards_total", "Forward passes of the vision tower.", forwards_.load());
  counter("sluice_clip_text_forwards_total",
          "Forward passes of the CLIP text tower (the queued texts of several requests each).",
          text_forwards_.load());
  counter("sluice_image_forwards_coalesced_total",
          "Vision forwards that held the images of more than one request.", coalesced_.load());
  // Busy time of the vision engine: over a wall-clock interval, its increase divided by the
  // interval is the fraction of time a vision forward ran (1 = the model is the bound).
  s += "# HELP sluice_image_forward_seconds_total Time the engine spent in vision forwards "
       "(upload, forward, results).\n# TYPE sluice_image_forward_seconds_total counter\n"
       "sluice_image_forward_seconds_total{" +
       l + "} " + std::to_string(static_cast<double>(forward_ns_.load()) * 1e-9) + "\n";
  s += "# HELP sluice_image_cache_entries Image features held by the cache.\n"
       "# TYPE sluice_image_cache_entries gauge\nsluice_image_cache_entries{" +
       l + "} " + std::to_string(cache_.size()) + "\n";
  s += "# HELP sluice_image_cache_bytes Bytes accounted to the image feature cache.\n"
       "# TYPE sluice_image_cache_bytes gauge\nsluice_image_cache_bytes{" +
       l + "} " + std::to_string(cache_.bytes()) + "\n";
  return s;
}

void ClipEmbedder::HoldForTest(bool hold) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
  }
  cv_.notify_all();
}

void ClipEmbedder::WaitForTest(int64_t queued_images, int blocked, int queued_texts) {
  std::unique_lock<std::mutex> lock(mu_);
  test_cv_.wait(lock, [&] {
    const auto texts = std::count_if(queue_.begin(), queue_.end(),
                                     [](const std::shared_ptr<Job>& j) { return j->text; });
    return queued_images_ >= queued_images && blocked_ >= blocked && texts >= queued_texts;
  });
}

StatusOr<std::unique_ptr<ClipEmbedder>> ClipEmbedder::Load(const ClipEmbedderOptions& o) {
  // Decoded originals (tens of MB) and fetched bytes are allocated and freed per image on
  // many threads. glibc raises its mmap threshold after the first such free, and from then on
  // keeps them in per-thread arenas, where fragmentation holds on to memory: RSS then drifts
  // up under load. A fixed threshold keeps every block of 1 MiB or more mmapped, returned to
  // the system when freed (a page-fault cost of ~1 ms per decoded photo, vs. ~50 ms decoding).
  static std::once_flag once;
  std::call_once(once, [] { mallopt(M_MMAP_THRESHOLD, 1 << 20); });
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(o.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<ClipModel> model,
                   ClipModel::Load(o.dir, backend.get(), o.dtype));
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(o.dir + "/tokenizer.json")) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::FromDirectory(o.dir));
  }
  media::ImageProcessorConfig processor;
  if (model->has_vision()) {
    const std::string pp = o.dir + "/preprocessor_config.json";
    if (!std::filesystem::exists(pp)) {
      return InvalidArgument(o.dir + ": a CLIP vision tower needs preprocessor_config.json");
    }
    ASSIGN_OR_RETURN(processor, media::ParseImageProcessorConfig(ReadFile(pp)));
    if (processor.out_height() != model->vision_config().image_size ||
        processor.out_width() != model->vision_config().image_size) {
      return InvalidArgument(pp + ": the processor makes " + std::to_string(processor.out_width()) +
                             "x" + std::to_string(processor.out_height()) +
                             " images; the vision tower takes " +
                             std::to_string(model->vision_config().image_size) + " square");
    }
  }
  if (o.decode_threads < 0 || o.max_image_batch < 0 || o.max_queued_images < 0) {
    return InvalidArgument("image decode threads, batch and queue sizes must not be negative");
  }
  return std::unique_ptr<ClipEmbedder>(
      new ClipEmbedder(o, std::move(backend), std::move(model), std::move(tokenizer), processor));
}

}  // namespace sluice::server
