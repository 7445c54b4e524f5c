// Host-side conversion of checkpoint tensors (f32, bf16 or f16 storage) to f32, for
// weights that are transformed on the host before upload (packing, folding tables).
#pragma once

#include <vector>

#include "backend/backend.h"

namespace sluice {

// *out = t as f32; other dtypes are Unsupported naming the tensor.
Status HostToF32(const HostTensor& t, std::vector<float>* out);

}  // namespace sluice
