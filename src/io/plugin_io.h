// IO processors of plugins (include/sluice/plugin.h, docs/plugins.md) behind the IoProcessor
// interface of the built-ins. One PluginIoProcessor is one plugin processor bound to one
// served model, registered beside the built-ins in the model's io::ProcessorRegistry
// (io/registry.h) and dispatched like them: POST /plugins/NAME (the body and the response are
// the plugin's) and POST /pooling {"io_processor": "NAME", "data": ..., "model"?} (the server
// unwraps "data" and wraps the response in the pooling envelope, as for every processor; the
// plugin sees call->route "/pooling").
//
// The request's state (PluginIoState: the plugin's allocations and their cleanups, the
// sequences, the response bytes) is an IoState: it goes when the server drops the request's
// state, on every path (response, error, client gone). The plugin's return codes map to
// Status codes (400 InvalidArgument, 404 NotFound, 429 ResourceExhausted, 500 Internal,
// 503 Unavailable); messages are prefixed with the processor's name.
//
// On a CLIP model (ModelContext::clip, task "clip"; server/clip_served.cc runs it) the
// sequences are PluginClipInputs instead (texts as token ids, images as sources): the CLIP
// path takes them with TakeClipInputs after Parse, embeds them, and passes PostProcess one
// output per input (values L2-normalised, raw the projection).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/plugins.h"
#include "sluice/io_processor.h"

namespace sluice::io {

// One input of a plugin request on a CLIP model, in the order added.
struct PluginClipInput {
  bool image = false;
  std::vector<int32_t> ids;  // a text's token ids (add_text tokenised it)
  std::string source;        // an image's URL, data: URI or local path
  std::string path;          // "sequence[i]", for errors
};

class PluginIoProcessor : public IoProcessor {
 public:
  // Use BindPluginIoProcessors (it checks the task and runs check_model).
  PluginIoProcessor(const IoProcessorEntry& entry, const ModelContext& model);
  std::string_view name() const override { return entry_.name; }
  const std::string& origin() const { return entry_.origin; }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& request) const override;
  Status PreProcess(const ModelContext& model, IoState& state,
                    std::vector<TokenSequence>* sequences) const override;
  StatusOr<IoResponse> PostProcess(const ModelContext& model, IoState& state,
                                   std::vector<PooledOutput>& outputs) const override;

  const sluice_io_model& model_info() const { return info_; }

  // The inputs a request added on a CLIP model (moved out of the state; empty elsewhere).
  static std::vector<PluginClipInput> TakeClipInputs(IoState& state);

 private:
  Status FromPlugin(int rc, const sluice_plugin_error& err, bool in_parse) const;

  IoProcessorEntry entry_;
  // The model as the plugin sees it (owns its strings: the context may move).
  std::string model_name_, model_task_, model_dir_;
  std::vector<std::string> labels_;
  std::vector<const char*> label_ptrs_;
  sluice_io_model info_{};
};

// The processors of `set`, each bound to `model`. FailedPrecondition naming the plugin file
// and the processor when its name is a built-in's (reserved), when the model's task is not
// the processor's (both tasks named), or with check_model's message when it refuses the model.
StatusOr<std::vector<std::shared_ptr<const PluginIoProcessor>>> BindPluginIoProcessors(
    const PluginSet& set, const ModelContext& model);

// Bytes the allocations of one request may take in all (alloc returns NULL past it).
inline constexpr size_t kPluginRequestMemory = size_t{64} << 20;

}  // namespace sluice::io
