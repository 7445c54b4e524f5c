// `sluice inspect --model DIR`: prints what sluice resolves from a model directory.
#include <cstdio>

#include "cli/command.h"
#include "cli/common.h"

namespace sluice::cli {
namespace {

int RunInspect(const ModelFlags& f) {
  auto engine_or = LoadEngine(f);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  const ModelInfo& i = (*engine_or)->info();
  const HeadSpec& h = (*engine_or)->head();
  std::printf("model:          %s\n", i.dir.c_str());
  std::printf("architecture:   %s (family %s)\n", i.architecture.c_str(), i.family.c_str());
  std::printf("task:           %s\n", TaskName(i.task));
  std::printf("dtype:          %s (checkpoint %s)\n", DTypeName(i.compute_dtype),
              DTypeName(i.checkpoint_dtype));
  if (!i.linear_layers.empty()) std::printf("linear layers:  %s\n", i.linear_layers.c_str());
  std::printf("parameters:     %lld\n", static_cast<long long>(i.parameters));
  std::printf("layers:         %d, hidden %d\n", i.num_layers, i.hidden_size);
  std::printf("max tokens:     %d per input\n", i.max_sequence_length);
  std::printf("pooling:        %s\n", PoolingName(h.pooling));
  std::printf("head:           %s\n", i.head.c_str());
  std::printf("output dim:     %d\n", h.output_dim);
  if (!h.labels.empty()) {
    std::printf("labels:        ");
    for (const auto& l : h.labels) std::printf(" %s", l.c_str());
    std::printf("\n");
  }
  std::printf("weights:        %s\n", i.weights.c_str());
  std::printf("device:         %s\n", i.backend.c_str());
  for (const auto& m : i.st_modules) std::printf("st module:      %s\n", m.c_str());
  return 0;
}

Registrar inspect_cmd(Command{
    "inspect", "Print the architecture, task, dtype, parameters, pooling and head of a model",
    [](CLI::App* sub) {
      auto f = std::make_shared<ModelFlags>();
      AddModelFlags(sub, f.get());
      return std::function<int()>([f] { return RunInspect(*f); });
    }});

}  // namespace
}  // namespace sluice::cli
