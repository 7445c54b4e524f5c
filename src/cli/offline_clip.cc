#include "cli/offline_clip.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "io/json.h"

namespace sluice::cli {
namespace {

using server::ClipItem;

constexpr size_t kChunk = 64;  // items per Embed call
constexpr int kCallers = 4;    // Embed calls in flight (fetch/decode overlap the forward)

StatusOr<ClipItem> ReadClipItem(simdjson::dom::element e, const std::string& where) {
  ClipItem it;
  it.path = where;
  std::string_view s;
  if (!e.get(s)) {
    it.text = std::string(s);
    if (it.text.empty()) return InvalidArgument(where + ": empty text");
    return it;
  }
  simdjson::dom::array arr;
  if (!e.get(arr)) {
    for (auto v : arr) {
      int64_t id;
      if (v.get(id) || id < 0 || id > INT32_MAX) {
        return InvalidArgument(where + ": token ids must be non-negative integers");
      }
      it.ids.push_back(static_cast<int32_t>(id));
    }
    it.has_ids = true;
    return it;
  }
  simdjson::dom::object o;
  if (!e.get(o)) {
    io::Fields f(o, where);
    simdjson::dom::element x;
    const bool has_image = f.Get("image", &x), has_text = f.Get("text", &x);
    if (has_image == has_text) {
      return InvalidArgument(where + ": needs exactly one of \"image\" or \"text\"");
    }
    RETURN_IF_ERROR(f.GetString(has_image ? "image" : "text", &it.text));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (it.text.empty())
      return InvalidArgument(where + ": empty " + (has_image ? "image" : "text"));
    it.image = has_image;
    return it;
  }
  return InvalidArgument(where +
                         ": must be a string, token ids, {\"text\": ...} or {\"image\": ...}");
}

void AppendFloat(std::string* out, float v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  const int len = std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  out->append(buf, static_cast<size_t>(len));
}

}  // namespace

int RunClipOffline(const ClipOfflineFlags& f) {
  bool normalize = true;
  if (f.normalize == "off") {
    normalize = false;
  } else if (f.normalize != "on" && f.normalize != "auto") {
    return ReportError(InvalidArgument("--normalize must be auto, on or off"));
  }
  // Every line as items: embed one, score two (query, document).
  std::vector<ClipItem> items;
  const size_t per_line = f.score ? 2 : 1;
  Status read = ForEachJsonLine(
      f.input, "input file",
      [&](size_t lineno, const std::string&, simdjson::dom::element doc) -> Status {
        const std::string where = f.input + ":" + std::to_string(lineno);
        simdjson::dom::object obj;
        if (doc.get(obj)) return InvalidArgument(where + ": expected a JSON object");
        if (f.score) {
          simdjson::dom::element q, d;
          if (doc["query"].get(q) || doc["document"].get(d)) {
            return InvalidArgument(where + ": expected \"query\" and \"document\"");
          }
          for (auto kv : obj) {
            if (kv.key != "query" && kv.key != "document") {
              return InvalidArgument(where + ": unknown field \"" + std::string(kv.key) + "\"");
            }
          }
          ASSIGN_OR_RETURN(ClipItem qi, ReadClipItem(q, where + " query"));
          ASSIGN_OR_RETURN(ClipItem di, ReadClipItem(d, where + " document"));
          items.push_back(std::move(qi));
          items.push_back(std::move(di));
          return Status::Ok();
        }
        simdjson::dom::element e;
        std::string field;
        for (auto kv : obj) {
          if (!field.empty()) {
            return InvalidArgument(where +
                                   ": one of \"text\", \"input_ids\" or \"image\" per line");
          }
          field = std::string(kv.key);
          e = kv.value;
        }
        if (field == "image") {
          std::string_view s;
          if (e.get(s) || s.empty()) {
            return InvalidArgument(where + ": \"image\" must be a non-empty string");
          }
          ClipItem it;
          it.image = true;
          it.text = std::string(s);
          it.path = where;
          items.push_back(std::move(it));
          return Status::Ok();
        }
        if (field == "text" || field == "input_ids" || field == "ids") {
          if ((field == "text") != e.is_string()) {
            return InvalidArgument(where + ": \"" + field + "\" must be " +
                                   (field == "text" ? "a string" : "a list of token ids"));
          }
          ASSIGN_OR_RETURN(ClipItem it, ReadClipItem(e, where));
          items.push_back(std::move(it));
          return Status::Ok();
        }
        return InvalidArgument(where + ": expected \"text\", \"input_ids\" or \"image\"");
      });
  if (!read.ok()) return ReportError(read);

  auto options = ToEmbedderOptions(f.image, f.model);
  if (!options.ok()) return ReportError(options.status());
  auto embedder_or = server::ClipEmbedder::Load(*options);
  if (!embedder_or.ok()) return ReportError(embedder_or.status());
  server::ClipEmbedder& embedder = **embedder_or;
  const int P = embedder.model().projection_dim();
  SLUICE_LOG_INFO("CLIP model {}: projection {}, {}", f.model.model, P, embedder.Describe());

  // Chunks of whole lines, several in flight; the first error in file order is reported.
  const size_t lines = items.size() / per_line;
  const size_t chunk_lines = std::max<size_t>(1, kChunk / per_line);
  const size_t chunks = (lines + chunk_lines - 1) / chunk_lines;
  std::vector<float> emb(items.size() * P);
  std::vector<Status> status(chunks);
  std::atomic<size_t> next{0}, done_lines{0};
  std::atomic<int64_t> tokens{0};
  std::mutex bar_mu;
  ProgressBar bar(f.score ? "pairs" : "inputs", lines, "inputs", false);
  auto worker = [&] {
    for (;;) {
      const size_t c = next++;
      if (c >= chunks) return;
      const size_t b = c * chunk_lines * per_line;
      const size_t e = std::min(items.size(), b + chunk_lines * per_line);
      std::vector<ClipItem> part(items.begin() + b, items.begin() + e);
      std::vector<float> out;
      int64_t t = 0;
      status[c] = embedder.Embed(part, &out, &t);
      if (status[c].ok()) std::copy(out.begin(), out.end(), emb.begin() + b * P);
      tokens += t;
      const size_t d = done_lines += (e - b) / per_line;
      std::lock_guard<std::mutex> lock(bar_mu);
      bar.Update(d, 0);
    }
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < std::min<int>(kCallers, static_cast<int>(chunks)); ++i) {
    callers.emplace_back(worker);
  }
  for (auto& t : callers) t.join();
  for (const Status& s : status) {
    if (!s.ok()) return ReportError(s);
  }
  bar.Finish(lines, 0);
  if (const auto vs = embedder.vision_stats(); vs.images > 0 && vs.forward_seconds > 0) {
    // The model's own rate, apart from fetching, decoding and the pipeline's fill and drain.
    std::fprintf(stderr,
                 "vision tower: %llu images in %llu forwards, %.3f s in forwards: %.1f images/s "
                 "of forward time\n",
                 static_cast<unsigned long long>(vs.images),
                 static_cast<unsigned long long>(vs.forwards), vs.forward_seconds,
                 static_cast<double>(vs.images) / vs.forward_seconds);
  }

  std::ofstream file;
  std::ostream* os = &std::cout;
  if (f.output != "-") {
    file.open(f.output);
    if (!file) return ReportError(NotFound("cannot write " + f.output));
    os = &file;
  }
  std::string line;
  for (size_t i = 0; i < lines; ++i) {
    line = "{\"index\":" + std::to_string(i);
    if (f.score) {
      float* q = emb.data() + (2 * i) * P;
      float* d = emb.data() + (2 * i + 1) * P;
      server::ClipEmbedder::Normalize(q, P);
      server::ClipEmbedder::Normalize(d, P);
      double dot = 0;
      for (int j = 0; j < P; ++j) dot += double(q[j]) * d[j];
      line += ",\"score\":";
      AppendFloat(&line, static_cast<float>(dot));
    } else {
      float* v = emb.data() + i * P;
      if (normalize) server::ClipEmbedder::Normalize(v, P);
      line += ",\"embedding\":[";
      for (int j = 0; j < P; ++j) {
        if (j) line += ',';
        AppendFloat(&line, v[j]);
      }
      line += "]";
    }
    line += "}\n";
    *os << line;
  }
  return 0;
}

}  // namespace sluice::cli
