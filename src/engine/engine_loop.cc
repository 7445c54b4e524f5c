#include "engine/engine_loop.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>

#include "core/log.h"

namespace sluice {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions options)
    : engine_(std::move(engine)),
      options_(std::move(options)),
      scheduler_(options_.limits),
      timer_(options_.coalesce) {
  use_types_ = engine_->model().config().type_vocab_size > 1;
  pipelined_ = engine_->pipelined();
  max_in_flight_ = pipelined_ ? Engine::kMaxInFlight : 1;
  // The threads below inherit this thread's affinity: what a hold returns them to.
  have_free_cpus_ = pthread_getaffinity_np(pthread_self(), sizeof(free_cpus_), &free_cpus_) == 0;
  sched_thread_ = std::thread([this] { SchedulerThread(); });
  engine_thread_ = std::thread([this] { EngineThread(); });
}

EngineLoop::~EngineLoop() { Shutdown(); }

Status EngineLoop::Validate(const std::vector<TokenSequence>& inputs) const {
  return ValidateSequences(engine_->limits(), inputs);
}

Status EngineLoop::Submit(std::shared_ptr<EngineRequest> request) {
  RETURN_IF_ERROR(Validate(request->inputs));
  request->outputs.assign(request->inputs.size(), PooledOutput{});
  request->enqueued = SteadyClock::now();
  if (request->inputs.empty()) {
    request->started = request->finished = request->enqueued;
    if (request->sink.on_done) request->sink.on_done(*request, Status::Ok());
    return Status::Ok();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    if (in_loop_ >= options_.max_queue_depth) {
      return Status(StatusCode::kResourceExhausted, "the request queue is full (" +
                                                        std::to_string(options_.max_queue_depth) +
                                                        " requests); retry later");
    }
    ++in_loop_;
    scheduler_.Add(std::move(request));
  }
  sched_cv_.notify_one();
  return Status::Ok();
}

void EngineLoop::Cancel(EngineRequest& request) {
  request.cancelled.store(true, std::memory_order_relaxed);
  { std::lock_guard<std::mutex> lock(mu_); }  // order the flag before the wake-up
  sched_cv_.notify_one();
}

void EngineLoop::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void EngineLoop::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  sched_cv_.notify_one();
}

int EngineLoop::in_loop() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_loop_;
}

int EngineLoop::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(scheduler_.queued());
}

void EngineLoop::Finish(const std::vector<std::shared_ptr<EngineRequest>>& done) {
  if (done.empty()) return;
  {
    // Before the callbacks: a client that resubmits on completion finds the room.
    std::lock_guard<std::mutex> lock(mu_);
    in_loop_ -= static_cast<int>(done.size());
  }
  const auto now = SteadyClock::now();
  for (const auto& r : done) {
    r->finished = now;
    if (r->started == SteadyClock::time_point{}) r->started = now;
    if (r->sink.on_done) r->sink.on_done(*r, r->failed ? r->failure : Status::Ok());
  }
}

void EngineLoop::SchedulerThread() {
  std::vector<std::shared_ptr<EngineRequest>> finished;
  auto free_buffer = [this] {
    for (int b = 0; b < kBuffers; ++b) {
      if (buffers_[b].state == BufferState::kFree) return b;
    }
    return -1;
  };
  for (;;) {
    finished.clear();
    int slot = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stopping_) {
        if (paused_ || scheduler_.empty() || ready_ >= 0 || free_buffer() < 0) {
          sched_cv_.wait(lock);
          continue;
        }
        // Batch coalescing: while batches run, wait until shortly before they finish.
        const auto at = timer_.FormAt(scheduler_.full_batch_queued());
        if (at <= SteadyClock::now()) break;
        sched_cv_.wait_until(lock, at);
      }
      if (stopping_) {
        scheduler_.DropAll(Status(StatusCode::kUnavailable, "the server is shutting down"),
                           &finished);
        sched_done_ = true;
        lock.unlock();
        engine_cv_.notify_one();
        Finish(finished);
        return;
      }
      slot = free_buffer();
      Prepared& p = buffers_[slot];
      scheduler_.NextBatch(SteadyClock::now(), &p.items, &finished);
      if (!p.items.empty()) p.state = BufferState::kPreparing;
    }
    Finish(finished);
    Prepared& p = buffers_[slot];
    if (p.items.empty()) continue;
    // Host-side preparation, outside the lock: overlaps the forwards in flight.
    sched_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
    p.batch.Clear();
    for (const BatchItem& it : p.items) {
      const TokenSequence& in = it.request->inputs[it.seq];
      p.batch.Add(in, use_types_);
    }
    p.outputs.resize(p.items.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      p.state = BufferState::kReady;
      ready_ = slot;
    }
    engine_cv_.notify_one();
  }
}

int EngineLoop::TakeReady() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_ < 0 || static_cast<int>(in_flight_.size()) >= max_in_flight_) return -1;
  const int b = ready_;
  ready_ = -1;
  buffers_[b].state = BufferState::kInFlight;
  return b;
}

void EngineLoop::SubmitBuffer(int b) {
  sched_cv_.notify_one();  // `ready` is free again: prepare the next batch now
  Prepared& p = buffers_[b];
  p.submitted = SteadyClock::now();
  for (const BatchItem& it : p.items) {
    if (it.request->started == SteadyClock::time_point{}) it.request->started = p.submitted;
  }
  const PrefixReuseStats before = engine_->prefix_reuse_stats();
  {
    // Counted before Submit: on CPU the forward runs inside it.
    std::lock_guard<std::mutex> lock(mu_);
    p.work = p.batch.num_tokens();
    p.estimate = timer_.OnSubmit(p.work, p.submitted);
  }
  p.status = engine_->Submit(p.batch, p.outputs.data());
  p.saved = engine_->prefix_reuse_stats().tokens_saved - before.tokens_saved;
  p.groups = engine_->prefix_reuse_stats().groups - before.groups;
  if (!p.status.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      timer_.Withdraw(p.estimate);
    }
    Deliver(b);  // nothing in flight for it
    return;
  }
  if (p.saved > 0) {  // shared-prefix reuse: fewer tokens computed than packed
    std::lock_guard<std::mutex> lock(mu_);
    timer_.Withdraw(p.estimate);
    p.work -= p.saved;
    p.estimate = timer_.OnSubmit(p.work, p.submitted);
  }
  in_flight_.push_back(b);
}

void EngineLoop::Deliver(int b) {
  Prepared& p = buffers_[b];
  const Status& st = p.status;
  const double secs = std::chrono::duration<double>(SteadyClock::now() - p.submitted).count();
  if (!st.ok()) SLUICE_LOG_ERROR("batch of {} sequences failed: {}", p.items.size(), st.message());
  std::vector<std::shared_ptr<EngineRequest>> finished;
  BatchStats bs;
  bs.num_seqs = p.batch.num_seqs();
  bs.num_tokens = p.batch.num_tokens();
  bs.compute_seconds = secs;
  bs.device_seconds = p.status.ok() ? p.device_seconds : 0.0;
  bs.prefix_tokens_saved = p.saved;
  bs.prefix_groups = p.groups;
  bs.ok = st.ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    int requests = 0;
    const EngineRequest* last = nullptr;
    for (size_t i = 0; i < p.items.size(); ++i) {
      EngineRequest& r = *p.items[i].request;
      if (&r != last) {
        ++requests;
        r.compute_seconds += secs;
        ++r.batches;
        last = &r;
      }
      if (st.ok()) {
        r.outputs[p.items[i].seq] = std::move(p.outputs[i]);
      } else if (!r.failed) {
        r.failed = true;
        r.failure = Status(StatusCode::kInternal, "forward failed: " + st.message());
      }
      if (--r.unfinished == 0) finished.push_back(p.items[i].request);
    }
    p.items.clear();
    p.state = BufferState::kFree;
    bs.num_requests = requests;
  }
  sched_cv_.notify_one();
  if (options_.on_batch) options_.on_batch(bs);
  Finish(finished);
}

void EngineLoop::EngineThread() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto work = [&] { return ready_ >= 0 || sched_done_ || !in_flight_.empty(); };
      while (!work()) {
        if (!holding_.load(std::memory_order_relaxed)) {
          engine_cv_.wait(lock);
        } else {
          engine_cv_.wait_until(lock, hold_until_);
          ReleaseHoldIfDueLocked();  // an idle loop's hold runs out as well
        }
      }
      if (ready_ < 0 && sched_done_ && in_flight_.empty()) return;  // nothing left to run
    }
    // Submit first: a ready batch queues behind the one in flight, so the device moves on
    // to it while this thread finishes the older one.
    if (const int b = TakeReady(); b >= 0) {
      SubmitBuffer(b);
      continue;
    }
    if (in_flight_.empty()) continue;  // a ready batch waits for room (cannot happen)
    const int oldest = in_flight_.front();
    in_flight_.erase(in_flight_.begin());
    const auto wait_begin = SteadyClock::now();
    buffers_[oldest].status = engine_->Complete();
    const auto done = SteadyClock::now();
    buffers_[oldest].device_seconds =
        std::chrono::duration<double>(done - std::max(buffers_[oldest].submitted, last_done_))
            .count();
    last_done_ = done;
    {
      // Measured when this thread had to wait for it (or the forward ran in Submit): then
      // `done` is when it finished.
      std::lock_guard<std::mutex> lock(mu_);
      const Prepared& p = buffers_[oldest];
      const bool exact = !pipelined_ || done - wait_begin >= std::chrono::microseconds(100);
      timer_.OnComplete(p.estimate, p.status.ok() ? p.work : 0, p.submitted, done, exact);
    }
    sched_cv_.notify_one();  // the expected finish moved
    // On an asynchronous device the next batch may have become ready while this one ran:
    // give it to the device before delivering results (callbacks, request bookkeeping) on
    // this thread. On CPU the next forward would run here, before this batch's delivery.
    if (pipelined_) {
      if (const int b = TakeReady(); b >= 0) SubmitBuffer(b);
    }
    // Recorded before delivery: a caller whose results arrived sees where its batch ran.
    engine_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
    if (holding_.load(std::memory_order_relaxed)) {  // no lock per batch otherwise
      std::lock_guard<std::mutex> lock(mu_);
      ReleaseHoldIfDueLocked();
    }
    Deliver(oldest);
  }
}

void EngineLoop::ReleaseHoldIfDueLocked() {
  if (!holding_.load(std::memory_order_relaxed) || SteadyClock::now() < hold_until_) return;
  held_ = LoopPlacement{};
  holding_.store(false, std::memory_order_relaxed);
  ApplyPlacementLocked();
}

LoopPlacement EngineLoop::placement() const {
  return {sched_cpu_.load(std::memory_order_relaxed), engine_cpu_.load(std::memory_order_relaxed)};
}

void EngineLoop::HoldPlacement(const LoopPlacement& p, std::chrono::milliseconds duration) {
  if (!have_free_cpus_) return;
  auto usable = [&](int cpu) {
    return cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &free_cpus_) ? cpu : -1;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    held_ = LoopPlacement{usable(p.scheduler_cpu), usable(p.engine_cpu)};
    // Both on one CPU is what a hold is to avoid: then the scheduler thread stays free.
    if (held_.scheduler_cpu == held_.engine_cpu) held_.scheduler_cpu = -1;
    hold_until_ = SteadyClock::now() + duration;
    holding_.store(held_.scheduler_cpu >= 0 || held_.engine_cpu >= 0, std::memory_order_relaxed);
    ApplyPlacementLocked();
  }
  engine_cv_.notify_one();  // an idle engine thread waits for the hold's end from now on
}

void EngineLoop::ApplyPlacementLocked() {
  auto apply = [&](std::thread& t, int cpu) {
    if (!t.joinable()) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    if (cpu >= 0) CPU_SET(cpu, &one);
    // Best effort: a CPU taken away since (cpuset change) only leaves the thread where it is.
    (void)pthread_setaffinity_np(t.native_handle(), sizeof(cpu_set_t),
                                 cpu >= 0 ? &one : &free_cpus_);
  };
  apply(sched_thread_, held_.scheduler_cpu);
  apply(engine_thread_, held_.engine_cpu);
}

LoopPlacement EngineLoop::HeldForTesting() const {
  auto held = [&](const std::thread& t) {
    cpu_set_t s;
    if (pthread_getaffinity_np(const_cast<std::thread&>(t).native_handle(), sizeof(s), &s) != 0 ||
        CPU_COUNT(&s) != 1 || CPU_EQUAL(&s, &free_cpus_)) {
      return -1;
    }
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &s)) return c;
    }
    return -1;
  };
  std::lock_guard<std::mutex> lock(mu_);
  return {held(sched_thread_), held(engine_thread_)};
}

void EngineLoop::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !sched_thread_.joinable()) return;
    stopping_ = true;
  }
  sched_cv_.notify_all();
  engine_cv_.notify_all();
  if (sched_thread_.joinable()) sched_thread_.join();
  if (engine_thread_.joinable()) engine_thread_.join();
}

}  // namespace sluice
