// The IO processors a served model dispatches, by name: the built-ins (io/builtins.h) and the
// model's plugin processors (io/plugin_io.h: the C ABI of include/sluice/plugin.h adapted onto
// IoProcessor). Both kinds implement the one IoProcessor interface and run through the same
// lifecycle in the server (server/service.cc): Parse -> PreProcess (token sequences, or the
// built-in tokenizer) -> engine -> PostProcess (the outputs in request order) -> response,
// the per-request IoState owned by the server and freed when the request ends.
//
// How a request reaches a processor:
//   a built-in's own routes         e.g. POST /v1/rerank -> "rerank" (FindRoute);
//   POST /plugins/NAME              any processor by name, its body and response its own;
//   POST /pooling {"io_processor": NAME, "data": D, "model"?}
//                                   any processor by name with D as its body; its response
//                                   goes under "data" of the pooling envelope
//                                   (PoolingIoData, PoolingIoResponse).
//
// The built-in names are reserved: a plugin processor may not take one (AddPlugin, and
// io::BindPluginIoProcessors at start-up). Const after construction (lookups thread-safe).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/io_processor.h"

namespace sluice::io {

struct ProcessorEntry {
  std::shared_ptr<const IoProcessor> processor;  // its name() is the entry's name
  std::string origin;                            // "built-in" or the plugin's file
  std::vector<std::string> routes;               // a built-in's own routes; none for plugins
  bool builtin = false;
};

class ProcessorRegistry {
 public:
  // The built-ins (shared, stateless processors) and no plugin processor.
  ProcessorRegistry();

  // Adds a plugin processor. FailedPrecondition "plugin ORIGIN: IO processor NAME: ..." when
  // its name is a built-in's (reserved) or already registered here.
  Status AddPlugin(std::shared_ptr<const IoProcessor> processor, const std::string& origin);

  // The built-in serving `route` (e.g. "/v1/embeddings"); null if none.
  const IoProcessor* FindRoute(std::string_view route) const;
  // The processor named `name` (built-in or plugin); null if none.
  const IoProcessor* Find(std::string_view name) const;
  const ProcessorEntry* FindEntry(std::string_view name) const;

  // Built-ins first (in BuiltinNames order), then plugins in registration order.
  const std::vector<ProcessorEntry>& entries() const { return entries_; }
  // "a, b" of the plugin processors (or "none").
  std::string PluginNames() const;

  // The built-in processors' names, "embeddings, embed, ..." (reserved for them).
  static std::string BuiltinNames();
  static bool IsBuiltinName(std::string_view name);
  // FailedPrecondition "WHERE: the name is reserved by a built-in IO processor (...)" when
  // `name` is a built-in's.
  static Status CheckNotBuiltin(std::string_view name, const std::string& where);

 private:
  std::vector<ProcessorEntry> entries_;
};

// /pooling with "io_processor": the body's "data" as JSON text (the processor's body).
// "model" and "io_processor" are the only other fields (a string each); "data" is required;
// a "model" naming another model is NotFound. Errors name the field.
StatusOr<std::string> PoolingIoData(const ModelContext& model, std::string_view body);

// The pooling envelope around processor `name`'s response (JSON):
//   {"id": "pool-...", "object": "io_processor", "created": <unix s>, "model": <name>,
//    "io_processor": NAME, "data": <response>, "usage": {"prompt_tokens": n, "total_tokens": n}}
std::string PoolingIoResponse(const ModelContext& model, std::string_view name,
                              std::string_view response, int64_t prompt_tokens);

}  // namespace sluice::io
