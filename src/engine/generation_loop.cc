#include "engine/generation_loop.h"

#include "core/log.h"

namespace sluice {

GenerationLoop::GenerationLoop(std::unique_ptr<Generator> generator, GenerationLoopOptions options)
    : gen_(std::move(generator)), options_(options) {
  Publish();
  thread_ = std::thread([this] { Run(); });
}

GenerationLoop::~GenerationLoop() { Shutdown(); }

Status GenerationLoop::Submit(std::shared_ptr<GenerateRequest> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    if (in_loop_ >= options_.max_queue_depth) {
      return Status(StatusCode::kResourceExhausted,
                    "too many requests: " + std::to_string(in_loop_) +
                        " queued or running (--max-queue-depth " +
                        std::to_string(options_.max_queue_depth) + ")");
    }
    // on_done leaves the loop's count; wrapped here so that every path (admission error,
    // finish, abort, shutdown) counts once.
    auto done = std::move(request->sink.on_done);
    request->sink.on_done = [this, done](GenerateRequest& r, const Status& s) {
      {
        std::lock_guard<std::mutex> l(mu_);
        --in_loop_;
      }
      if (done) done(r, s);
    };
    ++in_loop_;
    inbox_.push_back(std::move(request));
    wake_ = true;
  }
  cv_.notify_one();
  return Status::Ok();
}

void GenerationLoop::Cancel(GenerateRequest& request) {
  request.cancelled.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

void GenerationLoop::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    wake_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

GenerationSnapshot GenerationLoop::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snap_;
}

int GenerationLoop::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_loop_;
}

void GenerationLoop::Publish() {
  GenerationSnapshot s;  // read on the loop's thread (the only one touching gen_)
  const GenerationStats& st = gen_->stats();
  s.requests = static_cast<int>(gen_->num_requests());
  s.running = static_cast<int>(gen_->num_running());
  s.kv_blocks_in_use = gen_->blocks().in_use();
  s.kv_blocks_total = gen_->blocks().num_blocks();
  s.prefix_queries = gen_->blocks().stats().queries;
  s.prefix_hits = gen_->blocks().stats().hits;
  s.prompt_tokens = st.prompt_tokens;
  s.generation_tokens = st.generated_tokens;
  s.preemptions = st.preemptions;
  s.steps = st.steps;
  s.step_tokens_total = st.batched_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  s.waiting = static_cast<int>(inbox_.size()) + static_cast<int>(gen_->num_waiting());
  snap_ = s;
}

void GenerationLoop::Run() {
  std::deque<std::shared_ptr<GenerateRequest>> arrived;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return wake_ || stop_ || gen_->HasWork(); });
      wake_ = false;
      if (stop_) {
        arrived.swap(inbox_);
        break;
      }
      arrived.swap(inbox_);
    }
    for (auto& r : arrived) {
      if (r->cancelled.load()) {
        r->sink.on_done(*r, Status(StatusCode::kUnavailable, "cancelled"));
        continue;
      }
      if (Status s = gen_->Add(r); !s.ok()) r->sink.on_done(*r, s);
    }
    arrived.clear();
    if (gen_->HasWork()) {
      if (Status s = gen_->Step(); !s.ok()) {
        SLUICE_LOG_ERROR("generation step failed: {}", s.message());
      }
    }
    Publish();
  }
  // Shutdown: queued requests and running ones fail with 503.
  const Status down(StatusCode::kUnavailable, "the server is shutting down");
  for (auto& r : arrived) r->sink.on_done(*r, down);
  gen_->AbortAll();  // on_done (Unavailable) for every active request
  Publish();
}

}  // namespace sluice
