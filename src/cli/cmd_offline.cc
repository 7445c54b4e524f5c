// `sluice embed|classify|score --model DIR --input in.jsonl --output out.jsonl`
//
// Input lines:
//   {"input_ids": [...], "token_type_ids": [...]}   one full sequence ("ids" also accepted)
//   {"q": [...], "d": [...]}                         a pair, assembled as
//        prefix + q + separator + d + suffix, where a header line
//        {"prefix": [...], "separator": [...], "suffix": [...]} (any field optional) may come
//        first; for models with token types, the d part and suffix get type id 1.
//   {"text": "..."}                                  text, through the model's tokenizer
//   {"text": "...", "text_pair": "..."} or {"query": "...", "document": "..."}   a text pair
// Text needs DIR/tokenizer.json or DIR/vocab.txt; it is encoded with the tokenizer's special
// tokens (pairs with its pair template) on a thread pool, keeping input order. An encoding
// over the model's limit is an error unless --truncate (pairs: only the second text is cut).
//
// `sluice embed` L2-normalises embeddings unless --normalize off (auto: the model's default,
// sluice.json "normalize", else on), as the server's routes do. `sluice classify` on a token
// classifier (or with --task token-classify) writes {"index", "entities": [...]} lines with
// the token-classification pipeline's entities (--aggregation-strategy, --ignore-labels;
// io/token_classify.h); its inputs must be texts. On a CLIP directory `embed` and `score`
// take texts and images (cli/offline_clip.h).
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/image_flags.h"
#include "cli/offline_clip.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/model_bundle.h"
#include "io/json.h"
#include "io/offline.h"
#include "io/token_classify.h"
#include "server/clip_served.h"
#include "tokenizer/tokenizer.h"
#include "weights/config.h"

namespace sluice::cli {
namespace {

struct OfflineFlags {
  ModelFlags model;
  std::string input;
  std::string output = "-";
  int dimensions = 0;
  bool truncate = false;
  std::string normalize = "auto";  // embed: auto | on | off
  std::string aggregation = "none";
  std::string ignore_labels = "O";  // comma-separated
  ImageFlags image;                 // CLIP models (cli/offline_clip.h)
};

using TextInput = io::OfflineText;
using ParsedInputs = io::OfflineInputs;

Status ReadText(simdjson::dom::element doc, const char* field, const std::string& where,
                std::string* out) {
  std::string_view v;
  if (doc[field].get(v)) return InvalidArgument(where + ": \"" + field + "\" must be a string");
  out->assign(v);
  return Status::Ok();
}

Status ReadIds(simdjson::dom::element e, const char* field, size_t line,
               std::vector<int32_t>* out) {
  simdjson::dom::array arr;
  if (e.get(arr)) {
    return InvalidArgument("line " + std::to_string(line) + ": \"" + field +
                           "\" must be a list of token ids");
  }
  for (auto v : arr) {
    int64_t id;
    if (v.get(id) || id < 0 || id > INT32_MAX) {
      return InvalidArgument("line " + std::to_string(line) + ": \"" + field +
                             "\" holds a value that is not a token id");
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return Status::Ok();
}

StatusOr<ParsedInputs> ReadInputs(const std::string& path, bool use_types) {
  ParsedInputs parsed;
  std::vector<TokenSequence>& seqs = parsed.seqs;
  io::PairTemplate pair;
  auto read_line = [&](size_t lineno, const std::string&, simdjson::dom::element doc) -> Status {
    simdjson::dom::element f;
    TokenSequence s;
    if (!doc["input_ids"].get(f) || !doc["ids"].get(f)) {
      RETURN_IF_ERROR(ReadIds(f, "input_ids", lineno, &s.ids));
      if (!doc["token_type_ids"].get(f)) {
        RETURN_IF_ERROR(ReadIds(f, "token_type_ids", lineno, &s.type_ids));
        if (!use_types) s.type_ids.clear();
      }
    } else if (!doc["q"].get(f)) {
      std::vector<int32_t> q, d;
      RETURN_IF_ERROR(ReadIds(f, "q", lineno, &q));
      if (doc["d"].get(f)) {
        return InvalidArgument(path + ":" + std::to_string(lineno) + ": \"q\" without \"d\"");
      }
      RETURN_IF_ERROR(ReadIds(f, "d", lineno, &d));
      s = io::AssemblePair(pair, q, d, use_types);
    } else if (!doc["prefix"].get(f) || !doc["suffix"].get(f) || !doc["separator"].get(f)) {
      pair = io::PairTemplate();
      if (!doc["prefix"].get(f)) RETURN_IF_ERROR(ReadIds(f, "prefix", lineno, &pair.prefix));
      if (!doc["separator"].get(f)) {
        RETURN_IF_ERROR(ReadIds(f, "separator", lineno, &pair.separator));
      }
      if (!doc["suffix"].get(f)) RETURN_IF_ERROR(ReadIds(f, "suffix", lineno, &pair.suffix));
      return Status::Ok();
    } else if (!doc["text"].get(f) || !doc["query"].get(f)) {
      const std::string where = path + ":" + std::to_string(lineno);
      TextInput t;
      t.index = seqs.size();
      t.line = lineno;
      if (!doc["text"].get(f)) {
        RETURN_IF_ERROR(ReadText(doc, "text", where, &t.a));
        if (!doc["text_pair"].get(f)) {
          RETURN_IF_ERROR(ReadText(doc, "text_pair", where, &t.b));
          t.pair = true;
        }
      } else {
        RETURN_IF_ERROR(ReadText(doc, "query", where, &t.a));
        if (doc["document"].get(f)) {
          return InvalidArgument(where + ": \"query\" without \"document\"");
        }
        RETURN_IF_ERROR(ReadText(doc, "document", where, &t.b));
        t.pair = true;
      }
      parsed.texts.push_back(std::move(t));
    } else {
      return InvalidArgument(path + ":" + std::to_string(lineno) +
                             ": expected \"input_ids\", \"q\" and \"d\", \"text\", or "
                             "\"query\" and \"document\"");
    }
    seqs.push_back(std::move(s));
    return Status::Ok();
  };
  RETURN_IF_ERROR(ForEachJsonLine(path, "input file", read_line));
  return parsed;
}

// Tokenizes the text inputs (io::EncodeTexts) on `threads` threads (0 = all cores). Errors
// name the input file and line (the first failing line in file order).
Status EncodeTexts(const std::string& path, const Engine& engine, bool truncate, int threads,
                   bool keep, ParsedInputs* parsed) {
  if (parsed->texts.empty()) return Status::Ok();
  io::EncodeOptions eo;
  eo.truncate = truncate;
  eo.keep_encodings = keep;
  eo.where = [&path](const TextInput& t) { return path + ":" + std::to_string(t.line); };
  ThreadPool pool(threads > 0 ? threads : ThreadPool::HardwareThreads());
  return io::EncodeTexts(engine, eo, &pool, parsed);
}

// Shortest text that reads back as the same float (%.9g round-trips every float).
void AppendFloat(std::string* out, float v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  const int len = std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  out->append(buf, static_cast<size_t>(len));
}

void WriteFloats(std::string* out, const float* v, size_t n) {
  out->push_back('[');
  for (size_t i = 0; i < n; ++i) {
    if (i) out->push_back(',');
    AppendFloat(out, v[i]);
  }
  out->push_back(']');
}

void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// {"index": i, "entities": [...]} per input of a token classifier (texts only).
Status WriteTokenEntities(const OfflineFlags& f, const Engine& engine, const ParsedInputs& parsed,
                          const std::vector<PooledOutput>& outs, std::ostream& os) {
  io::TokenClassifyParams params;
  params.tokenizer = engine.bundle().tokenizer.get();
  params.labels = &engine.head().labels;
  if (!io::ParseAggregation(f.aggregation, &params.aggregation)) {
    return InvalidArgument("--aggregation-strategy must be none, simple, first, average or max");
  }
  params.ignore_labels.clear();
  for (size_t b = 0; b <= f.ignore_labels.size();) {
    size_t e = f.ignore_labels.find(',', b);
    if (e == std::string::npos) e = f.ignore_labels.size();
    if (e > b) params.ignore_labels.push_back(f.ignore_labels.substr(b, e - b));
    b = e + 1;
  }
  if (parsed.texts.size() != outs.size()) {
    return InvalidArgument(f.input +
                           ": token classification needs text inputs (\"text\", with "
                           "an optional \"text_pair\") on every line");
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const TextInput& t = parsed.texts[i];
    io::JsonWriter w;
    w.BeginObject();
    w.KeyInt("index", static_cast<int64_t>(i));
    w.Key("entities");
    w.BeginArray();
    for (int s = 0; s < (t.pair ? 2 : 1); ++s) {
      ASSIGN_OR_RETURN(auto ents,
                       io::ClassifyTokens(params, s == 0 ? t.a : t.b, parsed.encodings[i], s,
                                          outs[i].values.data()));
      for (const auto& e : ents) io::WriteEntity(w, e, params.aggregation, t.pair ? s : -1);
    }
    w.EndArray();
    w.EndObject();
    os << w.str() << "\n";
  }
  return Status::Ok();
}

int RunOffline(const OfflineFlags& f, Task task) {
  if (server::IsClipModelDirectory(f.model.model)) {
    if (task == Task::kClassify) {
      return ReportError(InvalidArgument(f.model.model +
                                         " is a CLIP model: it embeds (sluice embed) and scores "
                                         "(sluice score), it does not classify"));
    }
    if (f.dimensions != 0 || f.truncate) {
      return ReportError(
          InvalidArgument("--dimensions and --truncate do not apply to CLIP models"));
    }
    if (const auto unused = ClipUnusedModelFlags(f.model); !unused.empty()) {
      return ReportError(InvalidArgument(
          JoinFlagNames(unused) + ": text-engine settings that do not apply to " + f.model.model +
          ", a CLIP model (its vision batches: --max-image-batch, --max-queued-images)"));
    }
    ClipOfflineFlags cf;
    cf.model = f.model;
    cf.image = f.image;
    cf.input = f.input;
    cf.output = f.output;
    cf.normalize = f.normalize;
    cf.score = task == Task::kScore;
    return RunClipOffline(cf);
  }
  if (!f.image.given.empty()) {
    return ReportError(InvalidArgument(JoinFlagNames(f.image.given) + ": image settings; " +
                                       f.model.model + " is not a CLIP model"));
  }
  ModelFlags mf = f.model;
  if (mf.task.empty()) {
    mf.task = TaskName(task);
    // `sluice classify` on a token classifier classifies its tokens.
    auto bundle = LoadModelBundle(mf.model);
    if (task == Task::kClassify && bundle.ok() &&
        (*bundle)->arch->default_task == Task::kTokenClassify) {
      mf.task = TaskName(Task::kTokenClassify);
    }
  }
  auto engine_or = LoadEngine(mf);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  Engine& engine = **engine_or;
  const bool token_task = engine.info().task == Task::kTokenClassify;
  bool normalize = engine.head().normalize;
  if (f.normalize == "on" || f.normalize == "off") {
    normalize = f.normalize == "on";
  } else if (f.normalize != "auto") {
    return ReportError(InvalidArgument("--normalize must be auto, on or off"));
  }
  const bool use_types = io::UsesTokenTypes(engine);
  auto parsed_or = ReadInputs(f.input, use_types);
  if (!parsed_or.ok()) return ReportError(parsed_or.status());
  if (Status s = EncodeTexts(f.input, engine, f.truncate, f.model.threads, token_task, &*parsed_or);
      !s.ok()) {
    return ReportError(s);
  }
  if (Status s = io::MarkQueryExpansion(engine, &parsed_or->seqs); !s.ok()) return ReportError(s);
  const auto& inputs = parsed_or->seqs;
  if (f.dimensions != 0) {
    if (Status s = io::CheckDimensions(engine, f.dimensions, "--dimensions"); !s.ok()) {
      return ReportError(s);
    }
  }
  ProgressBar bar("sequences", inputs.size());
  int64_t total_tokens = 0;
  auto out_or = engine.Run(inputs, [&](size_t done, size_t, int64_t tokens) {
    total_tokens = tokens;
    bar.Update(done, tokens);
  });
  if (!out_or.ok()) return ReportError(out_or.status());
  io::DropDocumentSkiplist(engine, inputs, &*out_or);  // ColBERT documents (PyLate's skiplist)
  bar.Finish(inputs.size(), total_tokens);
  if (engine.prefix_reuse()) {
    const PrefixReuseStats& st = engine.prefix_reuse_stats();
    SLUICE_LOG_INFO(
        "shared-prefix reuse: {} groups in {} batches, {} prefix tokens not recomputed "
        "({:.1f}% of {} tokens)",
        st.groups, st.batches, st.tokens_saved,
        total_tokens > 0
            ? 100.0 * static_cast<double>(st.tokens_saved) / static_cast<double>(total_tokens)
            : 0.0,
        total_tokens);
  }
  if (f.model.profile) std::fprintf(stderr, "%s", engine.ProfileReport().c_str());

  std::ofstream file;
  std::ostream* os = &std::cout;
  if (f.output != "-") {
    file.open(f.output);
    if (!file) return ReportError(NotFound("cannot write " + f.output));
    os = &file;
  }
  const HeadSpec& head = engine.head();
  if (token_task) {
    if (Status s = WriteTokenEntities(f, engine, *parsed_or, *out_or, *os); !s.ok()) {
      return ReportError(s);
    }
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < out_or->size(); ++i) {
    PooledOutput& o = (*out_or)[i];
    line = "{\"index\":" + std::to_string(i);
    if (task == Task::kEmbed) {
      io::FinishEmbedding(f.dimensions, normalize, &o);
      if (io::MultiVector(head, o)) {
        const size_t dim = o.rows ? o.values.size() / o.rows : 0;
        line += ",\"embeddings\":[";
        for (int r = 0; r < o.rows; ++r) {
          if (r) line += ',';
          WriteFloats(&line, o.values.data() + r * dim, dim);
        }
        line += "]";
        if (!o.token_indices.empty()) {
          line += ",\"token_indices\":[";
          for (size_t k = 0; k < o.token_indices.size(); ++k) {
            line += (k ? "," : "") + std::to_string(o.token_indices[k]);
          }
          line += "]";
        }
      } else {
        line += ",\"embedding\":";
        WriteFloats(&line, o.values.data(), o.values.size());
      }
    } else if (task == Task::kScore) {
      line += ",\"score\":";
      AppendFloat(&line, o.values[0]);
    } else {
      line += ",\"label\":";
      AppendJsonString(&line, io::LabelName(head, io::BestLabel(o)));
      line += ",\"probs\":";
      WriteFloats(&line, o.values.data(), o.values.size());
      line += ",\"logits\":";
      WriteFloats(&line, o.raw.data(), o.raw.size());
      if (!head.thresholds.empty()) {
        line += ",\"labels\":[";
        bool first = true;
        for (size_t k : io::LabelsOverThreshold(head, o)) {
          if (!first) line += ',';
          first = false;
          AppendJsonString(&line, io::LabelName(head, k));
        }
        line += "]";
      }
    }
    line += "}\n";
    *os << line;
  }
  return 0;
}

Command MakeCommand(const char* name, const char* help, Task task) {
  return Command{name, help, [task](CLI::App* sub) {
                   auto f = std::make_shared<OfflineFlags>();
                   AddModelFlags(sub, &f->model);
                   sub->add_option("--input", f->input, "input JSONL file")->required();
                   sub->add_option("--output", f->output, "output JSONL file (- = stdout)")
                       ->capture_default_str();
                   sub->add_flag("--truncate", f->truncate,
                                 "cut text inputs to the model's limit (pairs: the second text) "
                                 "instead of refusing them");
                   if (task == Task::kEmbed) {
                     sub->add_option("--dimensions", f->dimensions,
                                     "Matryoshka: keep the first N dimensions (renormalised)");
                     sub->add_option("--normalize", f->normalize,
                                     "auto | on | off: L2-normalise the embeddings (auto: the "
                                     "model's default, sluice.json \"normalize\", else on)")
                         ->capture_default_str();
                   }
                   if (task == Task::kClassify) {
                     sub->add_option("--aggregation-strategy", f->aggregation,
                                     "token classifiers: none | simple | first | average | max "
                                     "(the token-classification pipeline's)")
                         ->capture_default_str();
                     sub->add_option("--ignore-labels", f->ignore_labels,
                                     "token classifiers: labels to drop, comma-separated")
                         ->capture_default_str();
                   }
                   if (task != Task::kClassify) {
                     AddImageFlags(sub, &f->image, /*offline=*/true);
                   }
                   return std::function<int()>([f, task, sub] {
                     if (task != Task::kClassify) f->image.given = GivenImageFlags(f->image);
                     return RunOffline(*f, task);
                   });
                 }};
}

Registrar embed_cmd(MakeCommand("embed", "Embed token-id sequences or texts from a JSONL file",
                                Task::kEmbed));
Registrar classify_cmd(MakeCommand("classify",
                                   "Classify token-id sequences or texts from a JSONL file (token "
                                   "classifiers: the entities of texts)",
                                   Task::kClassify));
Registrar score_cmd(MakeCommand("score", "Score (rerank) pairs from a JSONL file", Task::kScore));

}  // namespace
}  // namespace sluice::cli
