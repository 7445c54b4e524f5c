#include "engine/scheduler.h"

namespace sluice {

void Scheduler::Add(std::shared_ptr<EngineRequest> request) {
  request->next = 0;
  request->unfinished = request->inputs.size();
  int64_t t = 0;
  for (const auto& s : request->inputs) t += static_cast<int64_t>(s.ids.size());
  request->total_tokens = t;
  queued_tokens_ += t;
  queued_seqs_ += static_cast<int64_t>(request->inputs.size());
  queue_.push_back(std::move(request));
}

bool Scheduler::DropRest(EngineRequest& r, const Status& status) {
  const size_t rest = r.inputs.size() - r.next;
  for (size_t i = r.next; i < r.inputs.size(); ++i) {
    queued_tokens_ -= static_cast<int64_t>(r.inputs[i].ids.size());
  }
  queued_seqs_ -= static_cast<int64_t>(rest);
  r.next = r.inputs.size();
  r.unfinished -= rest;
  if (!r.failed) {
    r.failed = true;
    r.failure = status;
  }
  return r.unfinished == 0;
}

void Scheduler::NextBatch(SteadyClock::time_point now, std::vector<BatchItem>* batch,
                          std::vector<std::shared_ptr<EngineRequest>>* finished) {
  Fill(now, batch, finished);
  for (const BatchItem& it : *batch) {
    queued_tokens_ -= static_cast<int64_t>(it.request->inputs[it.seq].ids.size());
  }
  queued_seqs_ -= static_cast<int64_t>(batch->size());
}

void Scheduler::Fill(SteadyClock::time_point now, std::vector<BatchItem>* batch,
                     std::vector<std::shared_ptr<EngineRequest>>* finished) {
  batch->clear();
  int64_t tokens = 0;
  int seqs = 0;
  const int64_t max_tokens = limits_.max_batch_tokens;
  const int max_seqs = limits_.max_num_seqs;
  auto len = [](const EngineRequest& r, size_t i) {
    return static_cast<int64_t>(r.inputs[i].ids.size());
  };
  while (!queue_.empty() && seqs < max_seqs) {
    std::shared_ptr<EngineRequest> r = queue_.front();
    Status drop;
    if (r->cancelled.load(std::memory_order_relaxed)) {
      drop = Status(StatusCode::kUnavailable, "request cancelled");
    } else if (now >= r->deadline) {
      drop = Status(StatusCode::kUnavailable, "request deadline exceeded before it ran");
    } else if (r->failed) {
      drop = r->failure;
    }
    if (!drop.ok()) {
      queue_.pop_front();
      if (DropRest(*r, drop)) finished->push_back(std::move(r));
      continue;
    }
    // Remaining work of r.
    int64_t rest_tokens = 0;
    for (size_t i = r->next; i < r->inputs.size(); ++i) rest_tokens += len(*r, i);
    const int rest_seqs = static_cast<int>(r->inputs.size() - r->next);
    if (tokens + rest_tokens <= max_tokens && seqs + rest_seqs <= max_seqs) {
      for (size_t i = r->next; i < r->inputs.size(); ++i) {
        batch->push_back({r, static_cast<uint32_t>(i)});
      }
      tokens += rest_tokens;
      seqs += rest_seqs;
      r->next = r->inputs.size();
      queue_.pop_front();
      continue;
    }
    const bool half_full = 2 * tokens >= max_tokens || 2 * seqs >= max_seqs;
    const bool fits_fresh = rest_tokens <= max_tokens && rest_seqs <= max_seqs;
    if (!batch->empty() && (half_full || fits_fresh)) break;  // keep r together
    // Split r: its first sequences fill the batch.
    while (r->next < r->inputs.size() && seqs < max_seqs) {
      const int64_t n = len(*r, r->next);
      if (tokens + n > max_tokens && !batch->empty()) break;
      batch->push_back({r, static_cast<uint32_t>(r->next)});
      tokens += n;
      ++seqs;
      ++r->next;
    }
    if (r->next == r->inputs.size()) queue_.pop_front();
    break;  // the batch is full
  }
}

void Scheduler::DropAll(const Status& status,
                        std::vector<std::shared_ptr<EngineRequest>>* finished) {
  for (auto& r : queue_) {
    if (DropRest(*r, status)) finished->push_back(std::move(r));
  }
  queue_.clear();
  queued_tokens_ = queued_seqs_ = 0;
}

}  // namespace sluice
