// EngineLoop: the per-model serving loop. Owns the Engine; requests from any thread go
// into a bounded queue; a scheduler thread packs the next batch (host-side preparation)
// while the engine thread runs the current forward, so packing overlaps compute. The
// engine thread keeps up to Engine::kMaxInFlight batches submitted to the device: when the
// next batch is ready before the current one completes, it is submitted first, so the
// device does not wait for the previous batch's head and result delivery.
//
// On a backend that runs a forward inside Submit (CPU), one batch is in flight and its
// results are delivered before the next one starts.
//
// Batch coalescing (EngineLoopOptions::coalesce, BatchTimer): while batches run, the next
// one is formed shortly before they are expected to finish, so requests arriving in the
// meantime join it.
//
// Threads: Submit/Cancel/queue_depth are safe from any thread. Sink callbacks run on
// the loop's threads (engine thread for completed work, scheduler thread for dropped
// work), never under the loop's lock. engine() is const after construction and safe to
// read concurrently (info, head, model config); only the loop's thread runs forwards.
//
// Placement: the CPUs the two threads last ran batches on (placement()), and a time-bounded
// hold of the threads on given CPUs (HoldPlacement). A default switch between loaded
// versions hands the old default's placement to the new one: a loop whose threads idled has
// no load history left with the kernel, which then runs its scheduler and engine threads on
// one CPU for ~60 ms of traffic (the engine thread preempted 3-5 times a batch, ~1 ms per
// request; docs/benchmarks.md, issue 16), while the old default's CPUs fall idle.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/batch_timer.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace sluice {

// Reported after every forward, on the engine thread.
struct BatchStats {
  int num_seqs = 0;
  int64_t num_tokens = 0;
  int num_requests = 0;
  // From submission to the device until the results are back (includes waiting behind the
  // batch submitted before it, so overlapping batches may add up to more than wall time).
  double compute_seconds = 0;
  // The device's time on this batch alone: from its submission or the previous batch's
  // completion, whichever is later, until its results are back. Consecutive batches do
  // not overlap, so these add up to the device's busy time.
  double device_seconds = 0;
  int64_t prefix_groups = 0;        // shared-prefix reuse: groups sharing a prefix
  int64_t prefix_tokens_saved = 0;  // shared-prefix reuse: prefix tokens not recomputed
  bool ok = true;
};

// CPU numbers as sched_getcpu() reports them; -1: unknown (no batch yet, or not a CPU the
// process may use).
struct LoopPlacement {
  int scheduler_cpu = -1;
  int engine_cpu = -1;
};

struct EngineLoopOptions {
  SchedulerLimits limits;
  // Requests waiting or running at most; Submit beyond it is refused (ResourceExhausted).
  int max_queue_depth = 1024;
  std::function<void(const BatchStats&)> on_batch;  // optional (metrics)
  // Batch coalescing (engine/batch_timer.h): form the next batch shortly before the ones
  // running are expected to finish rather than as soon as a request is queued.
  bool coalesce = true;
};

class EngineLoop {
 public:
  EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions options);
  ~EngineLoop();  // Shutdown()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  const Engine& engine() const { return *engine_; }
  const EngineLoopOptions& options() const { return options_; }

  // Admission: checks every sequence against the model (ValidateSequences with the
  // engine's limits); the error names the input index. Safe from any thread; Submit calls it.
  Status Validate(const std::vector<TokenSequence>& inputs) const;

  // Queues a request. Errors (the sink is then NOT called): InvalidArgument/OutOfRange from
  // Validate, ResourceExhausted when max_queue_depth requests are already in the loop,
  // Unavailable after Shutdown. A request with no inputs completes at once.
  Status Submit(std::shared_ptr<EngineRequest> request);

  // Marks a request cancelled: sequences not yet scheduled are dropped; sink.on_done is called
  // with an Unavailable status once nothing of it is in flight.
  void Cancel(EngineRequest& request);

  // Requests submitted and not yet completed.
  int in_loop() const;
  // Requests with sequences waiting to be scheduled.
  int queue_depth() const;

  // While paused, requests queue but no new batch is formed (warm-up gating, tests).
  void Pause();
  void Resume();

  // Stops accepting work, fails queued requests with Unavailable, finishes the batches
  // already prepared, joins the threads. Idempotent.
  void Shutdown();

  // Where the scheduler and engine threads last prepared and delivered a batch.
  LoopPlacement placement() const;
  // Runs each thread on the CPU `p` names (a -1 leaves it free) for `duration`, then on every
  // CPU the process could use when the loop was built again. The engine thread lifts the hold
  // when it runs out, busy or idle; a new hold replaces the one in force. CPUs outside that
  // set are ignored; a placement naming one CPU for both holds only the engine thread. Threads an
  // engine starts while held (an OpenMP team's first forward) would inherit the CPU: a loop has run
  // its warm-up before anything holds it.
  void HoldPlacement(const LoopPlacement& p, std::chrono::milliseconds duration);
  // The CPU each thread is held on now (-1: free to run anywhere): tests.
  LoopPlacement HeldForTesting() const;

 private:
  // A batch buffer: free -> preparing (scheduler) -> ready -> in flight (engine) -> free.
  enum class BufferState { kFree, kPreparing, kReady, kInFlight };
  struct Prepared {
    std::vector<BatchItem> items;
    ForwardBatch batch;
    std::vector<PooledOutput> outputs;
    BufferState state = BufferState::kFree;
    SteadyClock::time_point submitted{};
    int64_t saved = 0;          // prefix tokens this batch did not recompute (stats)
    int64_t groups = 0;         // and its shared-prefix groups
    int64_t work = 0;           // tokens computed (after shared-prefix reuse)
    double estimate = 0;        // BatchTimer's estimate of its device time
    double device_seconds = 0;  // measured (BatchStats::device_seconds)
    Status status;              // a failed Submit
  };
  static constexpr int kBuffers = Engine::kMaxInFlight + 1;

  void SchedulerThread();
  void EngineThread();
  // Engine thread: takes the ready batch, if any and if the engine has room (under mu_).
  int TakeReady();
  // Engine thread: submits buffer `b` to the engine.
  void SubmitBuffer(int b);
  // Engine thread: delivers buffer `b`'s outputs (or failure) to its requests, frees it.
  void Deliver(int b);
  void Finish(const std::vector<std::shared_ptr<EngineRequest>>& done);
  // Under mu_: pins the threads per `held_` or frees them (held_ all -1).
  void ApplyPlacementLocked();
  // Under mu_: ends a hold whose time is up (held_ cleared, threads freed).
  void ReleaseHoldIfDueLocked();

  std::unique_ptr<Engine> engine_;
  EngineLoopOptions options_;
  bool use_types_ = false;
  bool pipelined_ = false;               // engine_->pipelined()
  int max_in_flight_ = 1;                // Engine::kMaxInFlight when pipelined, else 1
  SteadyClock::time_point last_done_{};  // the latest completion (engine thread)

  mutable std::mutex mu_;
  std::condition_variable sched_cv_;   // work arrived / a buffer freed / stop
  std::condition_variable engine_cv_;  // a batch is ready / stop
  Scheduler scheduler_;
  BatchTimer timer_;
  Prepared buffers_[kBuffers];
  int ready_ = -1;              // index of the buffer ready to run, or -1
  std::vector<int> in_flight_;  // buffers submitted to the engine, oldest first (engine thread)
  int in_loop_ = 0;
  bool stopping_ = false;
  bool paused_ = false;
  bool sched_done_ = false;
  std::thread sched_thread_, engine_thread_;
  std::atomic<int> sched_cpu_{-1}, engine_cpu_{-1};  // placement()
  cpu_set_t free_cpus_{};                            // the threads' affinity at construction
  bool have_free_cpus_ = false;
  LoopPlacement held_;                    // under mu_: the CPUs held on, -1 free
  std::atomic<bool> holding_{false};      // written under mu_: held_ names a CPU
  SteadyClock::time_point hold_until_{};  // under mu_: when the hold ends (held_ set)
};

}  // namespace sluice
