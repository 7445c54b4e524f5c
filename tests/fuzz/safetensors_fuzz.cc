// libFuzzer target over the safetensors reader: arbitrary bytes written to a temporary file
// and opened with WeightStore::OpenFile. A file that opens must describe tensors that lie
// within it: every byte of every tensor is read (a bad offset faults or trips ASan).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "weights/safetensors.h"

volatile uint64_t g_sink;

namespace {

const std::string& TempFile() {
  static const std::string path =
      (std::filesystem::temp_directory_path() /
       ("safetensors_fuzz_" + std::to_string(getpid()) + ".safetensors"))
          .string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = TempFile();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  auto store = sluice::WeightStore::OpenFile(path);
  if (!store.ok()) return 0;
  (void)store->DominantDType();
  (void)store->TotalParameters();
  uint64_t sum = 0;
  for (const std::string& name : store->Names()) {
    auto t = store->Get(name);
    if (!t.ok()) continue;
    int64_t n = 1;
    for (int64_t d : t->shape) {
      if (d < 0) std::abort();
      n *= d;
    }
    const auto bytes = static_cast<size_t>(n) * sluice::DTypeSize(t->dtype);
    if (bytes > size) std::abort();  // a tensor larger than the file
    const auto* p = static_cast<const uint8_t*>(t->data);
    for (size_t i = 0; i < bytes; ++i) sum += p[i];
  }
  g_sink = sum;  // keeps the reads
  return 0;
}
