// The serving loop of the generation engine: one thread drives a Generator, taking
// requests submitted from any thread. Each turn it admits what arrived, runs one step and
// publishes a snapshot of the engine's counters (for /metrics). Results reach each
// request through its ResponseSink, on the loop's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/generator.h"

namespace sluice {

struct GenerationLoopOptions {
  int max_queue_depth = 256;  // requests queued or running at most; beyond it 429
};

// Counters of the engine, copied after every step.
struct GenerationSnapshot {
  int running = 0;   // sequences running (prefill or decode)
  int waiting = 0;   // sequences waiting (new, or preempted) plus requests not yet admitted
  int requests = 0;  // requests in the engine
  int kv_blocks_in_use = 0, kv_blocks_total = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens
  int64_t prompt_tokens = 0, generation_tokens = 0, preemptions = 0, steps = 0;
  int64_t step_tokens_total = 0;  // tokens computed over all steps
};

class GenerationLoop {
 public:
  GenerationLoop(std::unique_ptr<Generator> generator, GenerationLoopOptions options);
  ~GenerationLoop();  // Shutdown

  // Limits and options are fixed after load: safe to read from any thread.
  const GenerationLimits& limits() const { return gen_->limits(); }
  const Generator& generator() const { return *gen_; }

  // Queues a request (validated by the caller: ValidateGeneration with limits()).
  // ResourceExhausted (429) when max_queue_depth requests are in the loop; Unavailable
  // after Shutdown. On success the sink reports (on_done exactly once).
  Status Submit(std::shared_ptr<GenerateRequest> request);
  // Cancels a request (any thread): at the next turn its blocks are freed and on_done runs.
  void Cancel(GenerateRequest& request);
  // Fails what is queued or running (Unavailable) and joins the thread. Idempotent.
  void Shutdown();

  GenerationSnapshot snapshot() const;
  int depth() const;

 private:
  void Run();
  void Publish();

  std::unique_ptr<Generator> gen_;
  GenerationLoopOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenerateRequest>> inbox_;
  int in_loop_ = 0;  // submitted, on_done not yet run
  bool wake_ = false, stop_ = false;
  GenerationSnapshot snap_;
  std::thread thread_;
};

}  // namespace sluice
