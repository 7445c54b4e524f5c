// The C API of include/sluice/sluice.h over the offline task path (io/offline.h): the same
// tokenisation, Engine::Run over the inputs in order, and post-processing as `sluice
// score|embed|classify`, so results are bit-identical to the CLI's.
//
// Every entry point runs inside Guard: Status errors become a sluice_status plus the
// thread-local message, and no exception leaves the library. A model's engine (not
// thread-safe, engine/engine.h) and its tokenisation pool are used under the model's mutex.
#include "sluice/sluice.h"

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "io/offline.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif
#ifndef SLUICE_BUILD_INFO
#define SLUICE_BUILD_INFO "unknown build"
#endif

struct sluice_model {
  std::unique_ptr<sluice::Engine> engine;
  std::mutex mu;                             // guards engine and pool
  std::unique_ptr<sluice::ThreadPool> pool;  // tokenisation, created on the first text input
  int threads = 0;
  std::string task, architecture, dtype, device;
};

struct sluice_result {
  struct Item {
    sluice::PooledOutput out;
    size_t dim = 0;
    int32_t label = -1;
    std::vector<int32_t> over;
  };
  std::vector<Item> items;
  bool classify = false;
};

struct sluice_tokens {
  sluice::Encoding enc;
  std::vector<uint32_t> offsets;
};

namespace {

using sluice::Status;
using sluice::StatusCode;

thread_local std::string g_last_error;
// Set by CheckVersion when it refuses an options struct: Guard reports SLUICE_ERROR_VERSION.
thread_local bool g_version_refused = false;

sluice_status ToCode(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return SLUICE_OK;
    case StatusCode::kInvalidArgument:
      return SLUICE_ERROR_INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return SLUICE_ERROR_NOT_FOUND;
    case StatusCode::kFailedPrecondition:
      return SLUICE_ERROR_FAILED_PRECONDITION;
    case StatusCode::kOutOfRange:
      return SLUICE_ERROR_OUT_OF_RANGE;
    case StatusCode::kResourceExhausted:
      return SLUICE_ERROR_RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable:
      return SLUICE_ERROR_UNAVAILABLE;
    case StatusCode::kUnsupported:
      return SLUICE_ERROR_UNSUPPORTED;
    case StatusCode::kInternal:
      return SLUICE_ERROR_INTERNAL;
  }
  return SLUICE_ERROR_INTERNAL;
}

sluice_status Fail(sluice_status code, std::string message) {
  g_last_error = std::move(message);
  return code;
}

// Runs fn (returning Status) with every exception caught: the one boundary between
// sluice's Status and the C caller.
template <class Fn>
sluice_status Guard(Fn&& fn) noexcept {
  try {
    g_last_error.clear();
    g_version_refused = false;
    Status s = fn();
    if (s.ok()) return SLUICE_OK;
    return Fail(g_version_refused ? SLUICE_ERROR_VERSION : ToCode(s.code()), s.message());
  } catch (const std::bad_alloc&) {
    return Fail(SLUICE_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(SLUICE_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(SLUICE_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

// An options struct's api_version: the same major version, a minor version not newer.
Status CheckVersion(uint32_t v, const char* what) {
  g_version_refused = true;
  if (v == 0) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + ".api_version is 0: initialise it with " + what + "_init");
  }
  const uint32_t major = v / 1000, minor = v % 1000;
  if (major != SLUICE_API_VERSION_MAJOR || minor > SLUICE_API_VERSION_MINOR) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + " built for sluice C API " + std::to_string(major) + "." +
                      std::to_string(minor) + "; this library implements " +
                      std::to_string(SLUICE_API_VERSION_MAJOR) + "." +
                      std::to_string(SLUICE_API_VERSION_MINOR));
  }
  g_version_refused = false;
  return Status::Ok();
}

Status ToEngineOptions(const char* dir, const sluice_load_options* o, sluice::EngineOptions* eo) {
  eo->model_dir = dir;
  if (!o) return Status::Ok();
  if (o->dtype && std::string(o->dtype) != "auto") {
    sluice::DType t;
    if (!sluice::ParseDType(o->dtype, &t)) {
      return sluice::InvalidArgument(std::string("dtype: unknown dtype \"") + o->dtype +
                                     "\" (auto, float32, bfloat16, float16, int8)");
    }
    eo->dtype = t;
  }
  if (o->task) {
    sluice::Task t;
    if (!sluice::ParseTask(o->task, &t) || t == sluice::Task::kGenerate) {
      return sluice::InvalidArgument(std::string("task: unknown task \"") + o->task +
                                     "\" (embed, classify, score, token-classify)");
    }
    eo->task = t;
  }
  const std::string device = o->device ? o->device : "cpu";
  if (device == "cpu") {
    eo->backend.device = sluice::DeviceKind::kCpu;
  } else if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    eo->backend.device = sluice::DeviceKind::kCuda;
    if (device.size() > 5) {
      const std::string n = device.substr(5);
      if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos) {
        return sluice::InvalidArgument("device: expected cpu or cuda[:N], got \"" + device + "\"");
      }
      eo->backend.device_index = std::stoi(n);
    }
  } else {
    return sluice::InvalidArgument("device: expected cpu or cuda[:N], got \"" + device + "\"");
  }
  if (o->threads < 0) return sluice::InvalidArgument("threads must be >= 0");
  if (o->max_batch_tokens < 0) return sluice::InvalidArgument("max_batch_tokens must be >= 0");
  if (o->max_num_seqs < 0) return sluice::InvalidArgument("max_num_seqs must be >= 0");
  eo->backend.num_threads = o->threads;
  eo->max_batch_tokens = o->max_batch_tokens;
  eo->max_num_seqs = o->max_num_seqs;
  return Status::Ok();
}

const char* DTypeLongName(sluice::DType t) {
  switch (t) {
    case sluice::DType::kF32:
      return "float32";
    case sluice::DType::kBF16:
      return "bfloat16";
    case sluice::DType::kF16:
      return "float16";
    default:
      return sluice::DTypeName(t);
  }
}

Status NeedTask(const sluice_model* m, sluice::Task task, const char* fn) {
  if (m->engine->info().task == task) return Status::Ok();
  return sluice::FailedPrecondition(std::string(fn) + ": the model " + m->architecture +
                                    " was loaded for task " + m->task + "; " + fn + " needs task " +
                                    sluice::TaskName(task) + " (sluice_load_options.task = \"" +
                                    sluice::TaskName(task) + "\")");
}

// Runs n inputs through the offline path: texts tokenised, then Engine::Run in input order.
// Called with m->mu held.
sluice::StatusOr<std::vector<sluice::PooledOutput>> RunInputs(sluice_model* m,
                                                              const sluice_input* inputs, size_t n,
                                                              bool truncate) {
  if (n > 0 && !inputs) return sluice::InvalidArgument("inputs is NULL");
  const sluice::Engine& engine = *m->engine;
  const bool use_types = sluice::io::UsesTokenTypes(engine);
  sluice::io::OfflineInputs parsed;
  parsed.seqs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const sluice_input& in = inputs[i];
    auto where = [i] { return "input " + std::to_string(i); };
    if (in.text) {
      if (in.ids || in.type_ids) {
        return sluice::InvalidArgument(where() + ": give text or token ids, not both");
      }
      sluice::io::OfflineText t;
      t.index = i;
      t.line = i;
      t.a = in.text;
      if (in.text_pair) {
        t.b = in.text_pair;
        t.pair = true;
      }
      parsed.texts.push_back(std::move(t));
      continue;
    }
    if (in.text_pair) return sluice::InvalidArgument(where() + ": text_pair without text");
    if (in.num_ids > 0 && !in.ids) {
      return sluice::InvalidArgument(where() + ": ids is NULL with num_ids " +
                                     std::to_string(in.num_ids));
    }
    sluice::TokenSequence& s = parsed.seqs[i];
    if (in.num_ids > 0) s.ids.assign(in.ids, in.ids + in.num_ids);
    if (in.type_ids && use_types) {
      s.type_ids.assign(in.type_ids, in.type_ids + in.num_ids);
    } else if (in.type_ids) {
      // A model without token types reads none: all zeros is what it computes, anything else
      // would be ignored, so it is refused (as the engine refuses out-of-range types).
      for (size_t k = 0; k < in.num_ids; ++k) {
        if (in.type_ids[k] != 0) {
          return sluice::InvalidArgument(
              where() + ": token type id " + std::to_string(in.type_ids[k]) + " at position " +
              std::to_string(k) + ": this model has no token types (type ids must be 0)");
        }
      }
    }
  }
  if (!parsed.texts.empty()) {
    sluice::io::EncodeOptions eo;
    eo.truncate = truncate;
    eo.where = [](const sluice::io::OfflineText& t) { return "input " + std::to_string(t.line); };
    eo.truncate_hint = "set sluice_run_options.truncate";
    if (!m->pool) {
      m->pool = std::make_unique<sluice::ThreadPool>(
          m->threads > 0 ? m->threads : sluice::ThreadPool::HardwareThreads());
    }
    RETURN_IF_ERROR(sluice::io::EncodeTexts(engine, eo, m->pool.get(), &parsed));
  }
  RETURN_IF_ERROR(sluice::io::MarkQueryExpansion(engine, &parsed.seqs));
  auto outs = m->engine->Run(parsed.seqs);
  if (outs.ok()) sluice::io::DropDocumentSkiplist(engine, parsed.seqs, &*outs);
  return outs;
}

Status CheckRunOptions(const sluice_run_options* o) {
  if (!o) return Status::Ok();
  RETURN_IF_ERROR(CheckVersion(o->api_version, "sluice_run_options"));
  if (o->truncate != 0 && o->truncate != 1) {
    return sluice::InvalidArgument("sluice_run_options.truncate must be 0 or 1");
  }
  if (o->normalize < -1 || o->normalize > 1) {
    return sluice::InvalidArgument("sluice_run_options.normalize must be -1 (auto), 0 or 1");
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

uint32_t sluice_api_version(void) { return SLUICE_API_VERSION; }

const char* sluice_version(void) { return SLUICE_VERSION " (" SLUICE_BUILD_INFO ")"; }

const char* sluice_last_error(void) { return g_last_error.c_str(); }

const char* sluice_status_name(int status) {
  switch (status) {
    case SLUICE_OK:
      return "SLUICE_OK";
    case SLUICE_ERROR_INVALID_ARGUMENT:
      return "SLUICE_ERROR_INVALID_ARGUMENT";
    case SLUICE_ERROR_NOT_FOUND:
      return "SLUICE_ERROR_NOT_FOUND";
    case SLUICE_ERROR_FAILED_PRECONDITION:
      return "SLUICE_ERROR_FAILED_PRECONDITION";
    case SLUICE_ERROR_OUT_OF_RANGE:
      return "SLUICE_ERROR_OUT_OF_RANGE";
    case SLUICE_ERROR_RESOURCE_EXHAUSTED:
      return "SLUICE_ERROR_RESOURCE_EXHAUSTED";
    case SLUICE_ERROR_UNAVAILABLE:
      return "SLUICE_ERROR_UNAVAILABLE";
    case SLUICE_ERROR_UNSUPPORTED:
      return "SLUICE_ERROR_UNSUPPORTED";
    case SLUICE_ERROR_INTERNAL:
      return "SLUICE_ERROR_INTERNAL";
    case SLUICE_ERROR_VERSION:
      return "SLUICE_ERROR_VERSION";
    default:
      return "SLUICE_ERROR_UNKNOWN";
  }
}

sluice_status sluice_model_load(const char* model_dir, const sluice_load_options* options,
                                sluice_model** out) {
  if (out) *out = nullptr;
  return Guard([&]() -> Status {
    if (!out) return sluice::InvalidArgument("sluice_model_load: out is NULL");
    if (!model_dir) return sluice::InvalidArgument("sluice_model_load: model_dir is NULL");
    if (options) RETURN_IF_ERROR(CheckVersion(options->api_version, "sluice_load_options"));
    sluice::EngineOptions eo;
    RETURN_IF_ERROR(ToEngineOptions(model_dir, options, &eo));
    ASSIGN_OR_RETURN(auto engine, sluice::Engine::Load(eo));
    auto m = std::make_unique<sluice_model>();
    const sluice::ModelInfo& info = engine->info();
    m->threads = options ? options->threads : 0;
    m->task = sluice::TaskName(info.task);
    m->architecture = info.architecture;
    m->dtype = DTypeLongName(info.compute_dtype);
    m->device = info.backend;
    m->engine = std::move(engine);
    *out = m.release();
    return Status::Ok();
  });
}

void sluice_model_free(sluice_model* model) {
  try {
    delete model;
  } catch (...) {  // destructors do not throw; nothing may cross the boundary regardless
  }
}

sluice_status sluice_model_get_info(const sluice_model* model, sluice_model_info* info) {
  return Guard([&]() -> Status {
    if (!model || !info) return sluice::InvalidArgument("sluice_model_get_info: NULL argument");
    const sluice::Engine& e = *model->engine;
    info->task = model->task.c_str();
    info->architecture = model->architecture.c_str();
    info->dtype = model->dtype.c_str();
    info->device = model->device.c_str();
    info->output_dim = e.head().output_dim;
    info->num_labels = static_cast<int32_t>(e.head().labels.size());
    info->max_sequence_length = e.info().max_sequence_length;
    info->has_tokenizer = e.bundle().tokenizer ? 1 : 0;
    info->multi_vector = e.head().pooling == sluice::PoolingKind::kAll ||
                         e.head().pooling == sluice::PoolingKind::kStep;
    return Status::Ok();
  });
}

const char* sluice_model_label(const sluice_model* model, size_t k) {
  if (!model) return nullptr;
  const auto& labels = model->engine->head().labels;
  return k < labels.size() ? labels[k].c_str() : nullptr;
}

sluice_status sluice_score(sluice_model* model, const sluice_input* inputs, size_t n,
                           const sluice_run_options* options, float* scores) {
  return Guard([&]() -> Status {
    if (!model) return sluice::InvalidArgument("sluice_score: model is NULL");
    if (n > 0 && !scores) return sluice::InvalidArgument("sluice_score: scores is NULL");
    RETURN_IF_ERROR(CheckRunOptions(options));
    RETURN_IF_ERROR(NeedTask(model, sluice::Task::kScore, "sluice_score"));
    std::lock_guard<std::mutex> lock(model->mu);
    ASSIGN_OR_RETURN(auto outs, RunInputs(model, inputs, n, options && options->truncate));
    for (size_t i = 0; i < n; ++i) scores[i] = outs[i].values[0];
    return Status::Ok();
  });
}

sluice_status sluice_score_pairs(sluice_model* model, const char* const* queries,
                                 const char* const* documents, size_t n, float* scores) {
  std::vector<sluice_input> inputs;
  const sluice_status code = Guard([&]() -> Status {
    if (n > 0 && (!queries || !documents)) {
      return sluice::InvalidArgument("sluice_score_pairs: queries or documents is NULL");
    }
    inputs.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (!queries[i] || !documents[i]) {
        return sluice::InvalidArgument("sluice_score_pairs: pair " + std::to_string(i) +
                                       " has a NULL text");
      }
      inputs[i].text = queries[i];
      inputs[i].text_pair = documents[i];
    }
    return Status::Ok();
  });
  if (code != SLUICE_OK) return code;
  return sluice_score(model, inputs.data(), n, nullptr, scores);
}

}  // extern "C"

namespace {

// Embed and classify: the outputs of n inputs into a new sluice_result.
sluice_status RunToResult(sluice_model* model, const sluice_input* inputs, size_t n,
                          const sluice_run_options* options, sluice_result** out, sluice::Task task,
                          const char* fn) {
  if (out) *out = nullptr;
  return Guard([&]() -> Status {
    if (!model || !out) return sluice::InvalidArgument(std::string(fn) + ": NULL argument");
    RETURN_IF_ERROR(CheckRunOptions(options));
    if (task == sluice::Task::kClassify &&
        model->engine->info().task == sluice::Task::kTokenClassify) {
      return sluice::Unsupported(std::string(fn) +
                                 ": token classification (entities per token) is not in the C "
                                 "API; use `sluice classify` or `sluice serve` /token-classify");
    }
    RETURN_IF_ERROR(NeedTask(model, task, fn));
    const sluice::Engine& engine = *model->engine;
    const sluice::HeadSpec& head = engine.head();
    const int dims = options ? options->dimensions : 0;
    bool normalize = head.normalize;
    if (options && options->normalize >= 0) normalize = options->normalize == 1;
    if (task == sluice::Task::kEmbed && dims != 0) {
      RETURN_IF_ERROR(sluice::io::CheckDimensions(engine, dims, "dimensions"));
    } else if (dims != 0) {
      return sluice::InvalidArgument(std::string(fn) + ": dimensions applies to sluice_embed");
    }
    auto result = std::make_unique<sluice_result>();
    result->classify = task == sluice::Task::kClassify;
    {
      std::lock_guard<std::mutex> lock(model->mu);
      ASSIGN_OR_RETURN(auto outs, RunInputs(model, inputs, n, options && options->truncate));
      result->items.resize(n);
      for (size_t i = 0; i < n; ++i) {
        sluice_result::Item& it = result->items[i];
        it.out = std::move(outs[i]);
        if (task == sluice::Task::kEmbed) {
          sluice::io::FinishEmbedding(dims, normalize, &it.out);
          it.dim = it.out.rows > 0 ? it.out.values.size() / static_cast<size_t>(it.out.rows) : 0;
        } else {
          it.out.rows = 1;
          it.dim = it.out.values.size();
          it.label = static_cast<int32_t>(sluice::io::BestLabel(it.out));
          for (size_t k : sluice::io::LabelsOverThreshold(head, it.out)) {
            it.over.push_back(static_cast<int32_t>(k));
          }
        }
      }
    }
    *out = result.release();
    return Status::Ok();
  });
}

}  // namespace

extern "C" {

sluice_status sluice_embed(sluice_model* model, const sluice_input* inputs, size_t n,
                           const sluice_run_options* options, sluice_result** out) {
  return RunToResult(model, inputs, n, options, out, sluice::Task::kEmbed, "sluice_embed");
}

sluice_status sluice_classify(sluice_model* model, const sluice_input* inputs, size_t n,
                              const sluice_run_options* options, sluice_result** out) {
  return RunToResult(model, inputs, n, options, out, sluice::Task::kClassify, "sluice_classify");
}

size_t sluice_result_count(const sluice_result* result) {
  return result ? result->items.size() : 0;
}

const float* sluice_result_values(const sluice_result* result, size_t i, size_t* rows,
                                  size_t* dim) {
  if (!result || i >= result->items.size()) {
    if (rows) *rows = 0;
    if (dim) *dim = 0;
    return nullptr;
  }
  const sluice_result::Item& it = result->items[i];
  if (rows) *rows = static_cast<size_t>(it.out.rows);
  if (dim) *dim = it.dim;
  return it.out.values.data();
}

const float* sluice_result_logits(const sluice_result* result, size_t i, size_t* n) {
  if (!result || !result->classify || i >= result->items.size()) {
    if (n) *n = 0;
    return nullptr;
  }
  const sluice_result::Item& it = result->items[i];
  if (n) *n = it.out.raw.size();
  return it.out.raw.data();
}

int32_t sluice_result_label(const sluice_result* result, size_t i) {
  if (!result || i >= result->items.size()) return -1;
  return result->items[i].label;
}

const int32_t* sluice_result_labels_over_threshold(const sluice_result* result, size_t i,
                                                   size_t* n) {
  if (!result || i >= result->items.size()) {
    if (n) *n = 0;
    return nullptr;
  }
  const sluice_result::Item& it = result->items[i];
  if (n) *n = it.over.size();
  return it.over.data();
}

void sluice_result_free(sluice_result* result) { delete result; }

sluice_status sluice_tokenize(const sluice_model* model, const char* text, const char* text_pair,
                              int add_special_tokens, sluice_tokens** out) {
  if (out) *out = nullptr;
  return Guard([&]() -> Status {
    if (!model || !text || !out) return sluice::InvalidArgument("sluice_tokenize: NULL argument");
    const auto& tok = model->engine->bundle().tokenizer;
    if (!tok) {
      return sluice::FailedPrecondition(
          "sluice_tokenize: the model has no tokenizer "
          "(tokenizer.json or vocab.txt in " +
          model->engine->info().dir + ")");
    }
    auto t = std::make_unique<sluice_tokens>();
    if (text_pair) {
      ASSIGN_OR_RETURN(t->enc, tok->EncodePair(text, text_pair, add_special_tokens != 0));
    } else {
      ASSIGN_OR_RETURN(t->enc, tok->Encode(text, add_special_tokens != 0));
    }
    t->offsets.reserve(2 * t->enc.offsets.size());
    for (const auto& [b, e] : t->enc.offsets) {
      t->offsets.push_back(b);
      t->offsets.push_back(e);
    }
    *out = t.release();
    return Status::Ok();
  });
}

size_t sluice_tokens_count(const sluice_tokens* tokens) { return tokens ? tokens->enc.size() : 0; }

const int32_t* sluice_tokens_ids(const sluice_tokens* tokens) {
  return tokens ? tokens->enc.ids.data() : nullptr;
}

const int32_t* sluice_tokens_type_ids(const sluice_tokens* tokens) {
  return tokens ? tokens->enc.type_ids.data() : nullptr;
}

const uint32_t* sluice_tokens_offsets(const sluice_tokens* tokens) {
  return tokens ? tokens->offsets.data() : nullptr;
}

const char* sluice_tokens_token(const sluice_tokens* tokens, size_t i) {
  if (!tokens || i >= tokens->enc.tokens.size()) return nullptr;
  return tokens->enc.tokens[i].c_str();
}

void sluice_tokens_free(sluice_tokens* tokens) { delete tokens; }

}  // extern "C"
