#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace sluice::server {
namespace {

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,     10,   30};
// Stages can take microseconds (parse, respond): finer buckets below 1 ms.
const std::vector<double> kStageBounds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
    0.1,     0.15,   0.2,     0.3,    0.5,   0.75,   1,     2.5,  5,     10,   30};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(std::string* out, const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{" + labels + sep + "le=\"" +
            (i < bounds_.size() ? Num(bounds_[i]) : std::string("+Inf")) + "\"} " +
            std::to_string(cum) + "\n";
  }
  const std::string l = labels.empty() ? "" : "{" + labels + "}";
  *out += name + "_sum" + l + " " + Num(sum_) + "\n";
  *out += name + "_count" + l + " " + std::to_string(count_) + "\n";
}

const char* StageName(Stage s) {
  switch (s) {
    case Stage::kParse:
      return "parse";
    case Stage::kTokenize:
      return "tokenize";
    case Stage::kQueue:
      return "queue";
    case Stage::kCompute:
      return "compute";
    case Stage::kRespond:
      return "respond";
  }
  return "?";
}

Metrics::Metrics(std::string labels)
    : labels_(std::move(labels)),
      batch_seqs_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      batch_tokens_({64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}) {
  for (int i = 0; i < kNumStages; ++i) stages_.emplace_back(kStageBounds);
}

void Metrics::RecordResponse(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
  auto it = latency_.find(route);
  if (it == latency_.end()) it = latency_.try_emplace(route, kLatencyBounds).first;
  it->second.Observe(seconds);
}

void Metrics::RecordStage(Stage stage, double seconds) {
  stages_[static_cast<int>(stage)].Observe(seconds);
}

void Metrics::RecordPrefixReuse(int64_t groups, int64_t tokens_saved) {
  if (groups <= 0) return;
  prefix_batches_++;
  prefix_groups_ += static_cast<uint64_t>(groups);
  prefix_saved_ += static_cast<uint64_t>(std::max<int64_t>(tokens_saved, 0));
}

void Metrics::RecordBatch(int num_seqs, int64_t num_tokens, double seconds) {
  batch_seqs_.Observe(num_seqs);
  batch_tokens_.Observe(static_cast<double>(num_tokens));
  batches_++;
  busy_ns_ += static_cast<uint64_t>(seconds * 1e9);
}

void Metrics::AddTokens(int64_t n) { tokens_ += static_cast<uint64_t>(n); }
void Metrics::AddCancelled() { cancelled_++; }

std::string Metrics::Series(const char* name) const {
  return labels_.empty() ? std::string(name) : std::string(name) + "{" + labels_ + "}";
}

void Metrics::AppendResponses(std::string* out) const {
  const std::string l = labels_.empty() ? "" : labels_ + ",";
  Header(out, "sluice_requests_total", "counter", "HTTP responses by route and status code.");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, n] : requests_) {
    *out += "sluice_requests_total{" + l + "route=\"" + LabelValue(key.first) + "\",code=\"" +
            std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  Header(out, "sluice_request_duration_seconds", "histogram",
         "End-to-end request latency (request read to response handed to the socket).");
  for (const auto& [route, h] : latency_) {
    h.Render(out, "sluice_request_duration_seconds", l + "route=\"" + LabelValue(route) + "\"");
  }
}

std::string Metrics::RenderResponses() const {
  std::string out;
  AppendResponses(&out);
  return out;
}

std::string Metrics::Render(const GaugeValues& g) const {
  std::string out;
  out.reserve(8192);
  AppendResponses(&out);
  const std::string l = labels_.empty() ? "" : labels_ + ",";
  Header(&out, "sluice_stage_seconds", "histogram",
         "Per-request time by stage (the stages tile the end-to-end latency): parse (request "
         "read to body validated, incl. the wait for a worker), tokenize (inputs to engine "
         "sequences), queue (engine queue wait), compute (first batch start to last batch "
         "end), respond (engine done to response handed to the connection).");
  for (int i = 0; i < kNumStages; ++i) {
    stages_[i].Render(&out, "sluice_stage_seconds",
                      l + "stage=\"" + StageName(static_cast<Stage>(i)) + "\"");
  }
  Header(&out, "sluice_batch_size", "histogram", "Sequences per packed batch.");
  batch_seqs_.Render(&out, "sluice_batch_size", labels_);
  Header(&out, "sluice_batch_tokens", "histogram", "Tokens per packed batch.");
  batch_tokens_.Render(&out, "sluice_batch_tokens", labels_);
  Header(&out, "sluice_batches_total", "counter", "Packed forward passes run.");
  out += Series("sluice_batches_total") + " " + std::to_string(batches_.load()) + "\n";
  Header(&out, "sluice_engine_busy_seconds_total", "counter",
         "Time the engine spent in packed forwards (busy / wall time = engine utilisation).");
  out += Series("sluice_engine_busy_seconds_total") + " " + Num(busy_ns_.load() * 1e-9) + "\n";
  Header(&out, "sluice_prefix_reuse_batches_total", "counter",
         "Packed forwards in which groups of sequences shared a prefix computed once.");
  out += Series("sluice_prefix_reuse_batches_total") + " " +
         std::to_string(prefix_batches_.load()) + "\n";
  Header(&out, "sluice_prefix_reuse_groups_total", "counter",
         "Groups of consecutive sequences (e.g. one query's documents) that shared a prefix "
         "computed once.");
  out += Series("sluice_prefix_reuse_groups_total") + " " + std::to_string(prefix_groups_.load()) +
         "\n";
  Header(&out, "sluice_prefix_reuse_tokens_saved_total", "counter",
         "Prefix tokens not recomputed thanks to shared-prefix reuse.");
  out += Series("sluice_prefix_reuse_tokens_saved_total") + " " +
         std::to_string(prefix_saved_.load()) + "\n";
  Header(&out, "sluice_tokens_total", "counter", "Tokens processed by the engine.");
  out += Series("sluice_tokens_total") + " " + std::to_string(tokens_.load()) + "\n";
  Header(&out, "sluice_requests_cancelled_total", "counter",
         "Requests whose client disconnected before the answer; their queued work was dropped.");
  out += Series("sluice_requests_cancelled_total") + " " + std::to_string(cancelled_.load()) + "\n";
  Header(&out, "sluice_queue_depth", "gauge", "Requests waiting for the engine.");
  out += Series("sluice_queue_depth") + " " + std::to_string(g.queue_depth) + "\n";
  Header(&out, "sluice_requests_in_flight", "gauge", "Requests accepted and not yet answered.");
  out += Series("sluice_requests_in_flight") + " " + std::to_string(g.in_flight) + "\n";
  Header(&out, "sluice_ready", "gauge", "1 when the model is loaded, warmed up and not draining.");
  out += Series("sluice_ready") + " " + std::to_string(g.ready) + "\n";
  return out;
}

std::string LabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string MergeExpositions(const std::vector<std::string>& parts) {
  struct Family {
    std::string help, type;
    std::string samples;
  };
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  for (const std::string& text : parts) {
    std::string current;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      if (line.empty()) continue;
      auto family_of = [&](std::string_view rest) {
        const size_t sp = rest.find(' ');
        return std::string(rest.substr(0, sp));
      };
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        current = family_of(line.substr(7));
        auto [it, fresh] = families.try_emplace(current);
        if (fresh) order.push_back(current);
        std::string& slot = line[2] == 'H' ? it->second.help : it->second.type;
        if (slot.empty()) slot = std::string(line);
        continue;
      }
      if (line[0] == '#') continue;
      // A sample belongs to the family whose header came last (histogram _bucket lines),
      // else to its own name.
      std::string name(line.substr(0, line.find_first_of("{ ")));
      std::string key = current;
      if (key.empty() || name.rfind(key, 0) != 0) {
        key = name;
        if (families.try_emplace(key).second) order.push_back(key);
      }
      families[key].samples.append(line).push_back('\n');
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families[name];
    if (!f.help.empty()) out += f.help + "\n";
    if (!f.type.empty()) out += f.type + "\n";
    out += f.samples;
  }
  return out;
}

}  // namespace sluice::server
