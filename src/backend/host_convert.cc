#include "backend/host_convert.h"

#include <cstring>

namespace sluice {

Status HostToF32(const HostTensor& t, std::vector<float>* out) {
  const int64_t n = t.numel();
  out->resize(n);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out->data(), t.data, n * sizeof(float));
      return Status::Ok();
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(t.data);
      for (int64_t i = 0; i < n; ++i) (*out)[i] = BF16ToF32(s[i]);
      return Status::Ok();
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(t.data);
      for (int64_t i = 0; i < n; ++i) (*out)[i] = F16ToF32(s[i]);
      return Status::Ok();
    }
    default:
      return Unsupported("tensor '" + t.name + "' has dtype " + DTypeName(t.dtype) +
                         "; expected f32, f16 or bf16");
  }
}

}  // namespace sluice
