// Prometheus metrics of the server, rendered by hand in the text exposition format
// (version 0.0.4). Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::server {

// Cumulative histogram with fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends the _bucket/_sum/_count lines; `labels` is "" or `key="value",...`.
  void Render(std::string* out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct GaugeValues {
  int queue_depth = 0;  // requests waiting in the engine queue
  int in_flight = 0;    // requests accepted and not yet answered
  int ready = 0;
};

// Stages of a request on the server; together they tile its end-to-end latency:
//   parse     request read -> body parsed and validated (includes the hop onto the worker
//             pool)
//   tokenize  inputs -> engine sequences
//   queue     submitted -> its first batch starts
//   compute   first batch start -> last batch end
//   respond   engine done -> response handed to the connection (the hop back to the worker
//             pool, post-processing, JSON)
enum class Stage { kParse, kTokenize, kQueue, kCompute, kRespond };
constexpr int kNumStages = 5;
const char* StageName(Stage s);

class Metrics {
 public:
  // `labels`: `key="value",...` put first in every series (the model and version of a
  // served model), or "" (the router's own responses).
  explicit Metrics(std::string labels = "");
  // One per response sent (or attempted: a client that went away counts under 499).
  void RecordResponse(const std::string& route, int status, double seconds);
  void RecordStage(Stage stage, double seconds);
  // One packed forward: its sequences, tokens and seconds (the engine's busy time).
  void RecordBatch(int num_seqs, int64_t num_tokens, double seconds = 0);
  // Shared-prefix reuse in one packed forward: groups of sequences that shared a prefix
  // computed once and the tokens that saved (a forward with groups > 0 counts as a batch).
  void RecordPrefixReuse(int64_t groups, int64_t tokens_saved);
  void AddTokens(int64_t n);
  void AddCancelled();
  std::string Render(const GaugeValues& gauges) const;
  // Only sluice_requests_total and sluice_request_duration_seconds (the router's own).
  std::string RenderResponses() const;

 private:
  void AppendResponses(std::string* out) const;
  std::string Series(const char* name) const;  // name{labels} or name

  std::string labels_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::deque<Histogram> stages_;  // by Stage (deque: Histogram is not movable)
  Histogram batch_seqs_, batch_tokens_;
  std::atomic<uint64_t> tokens_{0}, cancelled_{0}, batches_{0};
  std::atomic<uint64_t> busy_ns_{0};
  std::atomic<uint64_t> prefix_saved_{0}, prefix_batches_{0}, prefix_groups_{0};
};

// Merges Prometheus text expositions into one: each family's HELP/TYPE once, its samples
// from every input together (the exposition format wants a family's lines contiguous).
std::string MergeExpositions(const std::vector<std::string>& parts);
// Escapes a label value (backslash, double quote, newline).
std::string LabelValue(const std::string& v);

}  // namespace sluice::server
