// The generation engine: a ModelRunner with a paged KV cache (engine/kv_cache.h), the
// generation scheduler (engine/gen_scheduler.h) and the Sampler output stage. Each Step
// runs one forward over the scheduled decode tokens and prompt chunks, samples the next
// token of every sequence whose known tokens all ran, applies stop conditions, detokenises
// incrementally and reports through each request's ResponseSink.
//
// Not thread-safe: one thread drives a Generator (the offline CLI, or a serving loop);
// GenerateRequest::cancelled may be set from any thread and is honoured at the next Step.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/gen_scheduler.h"
#include "engine/logits_processor.h"
#include "engine/model_runner.h"
#include "engine/plugins.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "structured/constraint.h"

namespace sluice {

class DecodeStream;

struct TokenLogprobs {
  float logprob = 0.f;  // of the token itself (raw: before penalties/temperature)
  std::vector<std::pair<int32_t, float>> top;  // the top raw logprobs asked for
};

// One of a request's n completions.
struct CompletionOutput {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // per token, when the request asked for logprobs
  std::string text;                     // detokenised output (stop string removed)
  // "" while running; "stop" (eos, a stop token or string), "length" (max_tokens or the
  // model length), "abort" (cancelled).
  std::string finish_reason;
  std::optional<int32_t> stop_token;       // the stop token that ended it (not eos)
  std::optional<std::string> stop_string;  // the stop string that ended it
  std::vector<double> token_times;         // seconds since arrival, per token
};

struct GenerateRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  ResponseSink<GenerateRequest> sink;
  std::atomic<bool> cancelled{false};

  // Filled by the engine. sink.on_output runs after every step that added tokens to any of
  // the outputs; on_done once, when all n are finished (or the request failed).
  std::vector<CompletionOutput> outputs;
  std::vector<TokenLogprobs> prompt_logprobs;  // positions 1.. of the prompt, when asked
  int64_t cached_prompt_tokens = 0;            // prompt tokens served by the prefix cache
  // arrival: Add; scheduled: the start of its first step (queue time = scheduled - arrival;
  // prefill = first_token - scheduled; decode = finished - first_token).
  SteadyClock::time_point arrival{}, scheduled{}, first_token{}, finished{};
  bool done = false;
};

struct GenerationOptions {
  std::optional<DType> dtype;
  BackendOptions backend;
  bool profile = false;
  bool activation_residual = false;
  int max_model_len = 0;  // 0 = the model's max_position_embeddings
  // Step limits; 0 = the device's default (CPU 2048 tokens / 64 sequences, CUDA 16384 / 512).
  int64_t max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  // KV cache size: bytes (0 = from gpu_memory_utilization on CUDA, 2 GiB on CPU).
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0.9;  // CUDA: fraction of the device's memory in use at most
  bool prefix_caching = true;
  // CUDA graphs for decode steps (ModelRunner::CaptureDecodeGraphs); CUDA only, off with
  // profile.
  bool cuda_graphs = true;
  // Logits processors (docs/plugins.md): the plugins requests may name, and the threads that
  // fill the step's masks (0 = the machine's hardware threads, at most 16).
  std::shared_ptr<const PluginSet> plugins;
  int logits_threads = 0;
  // Structured outputs: compiled constraints kept (count) and the bytes of masks and walks
  // cached over all of them (structured::GrammarCache).
  size_t structured_cache_entries = 128;
  size_t structured_cache_bytes = structured::GrammarCache::kDefaultMaxBytes;
  // Tests: wraps every logits processor the engine creates (the structured-output one too).
  std::function<std::unique_ptr<LogitsProcessor>(std::unique_ptr<LogitsProcessor>)> wrap_processor;
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // computed (prefill) tokens
  int64_t generated_tokens = 0;  // sampled tokens
  int64_t preemptions = 0;
  int64_t requests_finished = 0;
  int64_t batched_tokens = 0;  // tokens computed over all steps (prefill chunks + decode)
  // Wall time of the steps' phases (seconds, summed over steps): planning and packing the
  // batch on the host, queueing the forward and sampling, waiting for the device, and
  // applying the results (stop checks, detokenisation, deliveries).
  double prepare_s = 0, launch_s = 0, wait_s = 0, apply_s = 0;
  // Of which logits processors: their update_state calls and filling the masks (seconds),
  // and the masks filled.
  double logits_s = 0;
  int64_t logits_masks = 0;
  // Steps with masks, and those whose masks were still being filled when the device had
  // finished the forward (the step waited for the masks), with their filling time (seconds).
  int64_t mask_steps = 0, mask_bound_steps = 0;
  double mask_bound_s = 0;
};

class Generator {
 public:
  static StatusOr<std::unique_ptr<Generator>> Load(std::shared_ptr<const ModelBundle> bundle,
                                                   const GenerationOptions& options);
  ~Generator();

  const GenerationOptions& options() const { return options_; }
  const ModelBundle& bundle() const { return runner_->bundle(); }
  const GenerationLimits& limits() const { return limits_; }
  const BlockPool& blocks() const { return *pool_; }
  int64_t kv_cache_bytes() const { return kv_->bytes(); }
  const GenerationStats& stats() const { return stats_; }
  const ModelRunner& runner() const { return *runner_; }
  Backend& backend() { return runner_->backend(); }
  std::vector<int> stop_token_ids() const { return eos_; }

  // Structured outputs: the constraint compiled for this model's vocabulary (cached per
  // constraint). Thread-safe: the HTTP front end compiles on its request threads, so that the
  // engine thread never waits for a compile. InvalidArgument names what is not supported.
  StatusOr<std::shared_ptr<structured::Grammar>> CompileConstraint(
      const structured::ConstraintSpec& spec) const;

  // Admission: validates the request (limits, sampling fields; errors name the field) and
  // queues it. On error nothing is queued and the sink is not called.
  Status Add(std::shared_ptr<GenerateRequest> request);
  // Cancels a request: its blocks are freed at once, its outputs finish with "abort", and
  // on_done runs (with an Unavailable status) before Abort returns.
  void Abort(GenerateRequest& request);
  // Abort for every active request.
  void AbortAll();
  bool HasWork() const { return !active_.empty(); }
  size_t num_requests() const { return active_.size(); }
  size_t num_running() const { return scheduler_->num_running(); }  // sequences
  size_t num_waiting() const { return scheduler_->num_waiting(); }  // sequences
  // One step. A failing forward fails the requests of the step (on_done with the error).
  Status Step();

 private:
  struct SeqState;
  Generator() = default;
  void Finish(SeqState& s, const char* reason);
  void CompleteRequest(GenerateRequest& r, const Status& status);
  // Applies one sampled token; true if the sequence finished.
  bool Accept(SeqState& s, const SampledToken& t, double now_s);
  // Logits processors: the requests' choice (admission), joining and leaving rows, the masks.
  Status SelectProcessors(GenerateRequest& r) const;
  void AttachProcessors(SeqState& s);
  void DetachProcessors(SeqState& s);
  void FillMasks(uint32_t* masks, int32_t* allowed);
  void Fail(const std::vector<StepItem>& items, const Status& st);

  GenerationOptions options_;
  GenerationLimits limits_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<GenScheduler> scheduler_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int> eos_;
  std::vector<std::shared_ptr<GenerateRequest>> active_;
  std::vector<std::unique_ptr<SeqState>> seqs_;
  GenerationStats stats_;
  uint64_t seed_state_ = 0x5EED5EED12345678ull;
  // Per-step scratch.
  ForwardBatch batch_;
  std::vector<StepItem> items_;
  std::vector<GenSequence*> preempted_;
  HostBuffer staging_;
  std::unique_ptr<Fence> done_;
  std::unique_ptr<Fence> forward_done_;  // after the forward: did the masks outlast it?
  // Logits processors: [0] structured outputs, then the plugins' (in PluginSet order), each
  // with its rows; the step's masks (one group per masked sampling row: its processors).
  std::vector<std::unique_ptr<LogitsProcessor>> processors_;
  std::vector<std::unique_ptr<LogitsRows>> lp_rows_;
  std::unique_ptr<ThreadPool> lp_pool_;
  std::vector<LpMaskJob> mask_jobs_;
  std::vector<LpMaskGroup> mask_groups_;
  std::vector<std::vector<const LpSlot*>> lp_partial_;
  // Structured outputs: the vocabulary trie and compiled grammars, built on first use.
  mutable std::mutex structured_mu_;
  mutable std::shared_ptr<structured::GrammarCache> grammars_;
};

}  // namespace sluice
