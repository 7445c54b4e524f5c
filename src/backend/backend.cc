#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "backend/cpu/cpu_backend.h"
#ifdef SLUICE_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace sluice {

Tensor Tensor::RowSlice(int64_t r0, int64_t n) const {
  Tensor t = *this;
  t.data = static_cast<char*>(data) + r0 * row_stride() * static_cast<int64_t>(DTypeSize(dtype));
  t.rows = n;
  return t;
}

Tensor Tensor::ColSlice(int64_t c0, int64_t n) const {
  Tensor t = *this;
  t.data = static_cast<char*>(data) + c0 * static_cast<int64_t>(DTypeSize(dtype));
  t.stride = row_stride();
  t.cols = n;
  return t;
}

std::vector<float> RopeInverseFrequencies(const RopeParams& p) {
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = rot / 2;
  std::vector<float> inv(static_cast<size_t>(std::max(half, 0)));
  // As transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  const float base = static_cast<float>(p.theta);
  for (int i = 0; i < half; ++i) {
    inv[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rot));
  }
  const RopeScaling& s = p.scaling;
  const auto factor = static_cast<float>(s.factor);
  if (s.kind == RopeScaling::Kind::kLinear) {
    for (float& f : inv) f /= factor;
  } else if (s.kind == RopeScaling::Kind::kLlama3) {
    // transformers' _compute_llama3_parameters, in float32.
    const auto old_len = static_cast<float>(s.original_max_position);
    const auto low = static_cast<float>(s.low_freq_factor);
    const auto high = static_cast<float>(s.high_freq_factor);
    const float low_wavelen = old_len / low, high_wavelen = old_len / high;
    for (float& f : inv) {
      const float wavelen = static_cast<float>(2 * M_PI) / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

namespace {

// The default fence: the backend's work is done once Synchronize() returns.
class SyncFence final : public Fence {
 public:
  explicit SyncFence(Backend* backend) : backend_(backend) {}
  void Record() override {}
  void Wait() override { backend_->Synchronize(); }

 private:
  Backend* backend_;
};

}  // namespace

void Backend::AttentionInputs(const AttentionInputParams& p) {
  RopeParams k = p.q_rope;
  k.x = p.k;
  k.num_heads = p.num_kv_heads;
  if (p.q_norm != nullptr) {
    QkNormRope(p.q_rope, *p.q_norm, p.eps);
  } else {
    Rope(p.q_rope);
  }
  if (p.k_norm != nullptr) {
    QkNormRope(k, *p.k_norm, p.eps);
  } else {
    Rope(k);
  }
  WriteKv(p.kv);
}

void Backend::LinearBlock(const LinearBlockParams& p) {
  Tensor in = p.x;
  if (p.norm_weight != nullptr) {
    RmsNorm(p.x, nullptr, *p.norm_weight, p.eps, p.normed);
    in = p.normed;
  }
  if (p.gate == Activation::kNone) {
    Linear({p.weight, in, p.out, Activation::kNone, p.residual});
    return;
  }
  Linear({p.weight, in, p.gate_up});
  if (p.residual == nullptr) {
    GatedActivate(p.gate_up, p.gate, p.out);
    return;
  }
  std::fprintf(stderr, "sluice: LinearBlock with a gate and a residual is not supported\n");
  std::abort();
}

HostBuffer Backend::AllocateHost(size_t bytes) {
  const size_t n = std::max<size_t>(bytes, 64);
  void* p = ::operator new (n, std::align_val_t{64});
  return HostBuffer(
      std::shared_ptr<void>(p, [](void* q) { ::operator delete (q, std::align_val_t{64}); }), n);
}

std::unique_ptr<Fence> Backend::CreateFence() { return std::make_unique<SyncFence>(this); }

Status Backend::BeginRecording() {
  return Unsupported("recorded forwards (CUDA graphs) need the CUDA backend");
}

StatusOr<std::unique_ptr<Recording>> Backend::EndRecording() {
  return FailedPrecondition("EndRecording without BeginRecording");
}

void Backend::Replay(const Recording&, const ReplayShape&) {
  std::fprintf(stderr, "sluice: Replay on a backend without recordings\n");
  std::abort();
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  switch (options.device) {
    case DeviceKind::kCpu:
      return CreateCpuBackend(options);
    case DeviceKind::kCuda:
#ifdef SLUICE_HAVE_CUDA
      return CreateCudaBackend(options);
#else
      return Unsupported("this build of sluice has no CUDA backend (build with -DSLUICE_CUDA=ON)");
#endif
  }
  return Internal("unknown device kind");
}

}  // namespace sluice
