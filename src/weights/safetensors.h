// safetensors reader: mmap'ed, zero-copy, single file or sharded
// (model.safetensors.index.json). Supports F32, F16, BF16 (and I32/I64 for buffers).
//
// A WeightStore is immutable after Open() and safe to read from any thread; the
// HostTensor views it returns stay valid for the store's lifetime.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "sluice/status.h"

namespace sluice {

class MappedFile;

class WeightStore {
 public:
  ~WeightStore();
  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;

  // Opens a model directory: model.safetensors, or model.safetensors.index.json and its
  // shards. A directory with only PyTorch pickle checkpoints (*.bin, *.pt) is refused.
  static StatusOr<WeightStore> OpenDirectory(const std::string& dir);
  // Opens one .safetensors file (e.g. a sentence-transformers Dense module).
  static StatusOr<WeightStore> OpenFile(const std::string& path);

  bool Has(const std::string& name) const { return index_.count(name) != 0; }
  // Looks up a tensor; error names the tensor and the file(s) searched.
  StatusOr<HostTensor> Get(const std::string& name) const;
  // Like Get, but also checks the shape.
  StatusOr<HostTensor> Get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<std::string> Names() const;
  // Dtype most tensors are stored in (by element count); F32 if empty.
  DType DominantDType() const;
  int64_t TotalParameters() const;
  const std::string& description() const { return description_; }

 private:
  WeightStore();
  Status AddFile(const std::string& path);

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, HostTensor> index_;
  std::map<std::string, std::string> tensor_file_;  // name -> file path
  std::string description_;
};

}  // namespace sluice
