#include "backend/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/kernels.h"

namespace sluice {
namespace {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::shared_ptr<void> AlignedAlloc(size_t bytes) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// Converts n elements between float dtypes (f32/f16/bf16 -> f32/bf16); same dtype copies.
void Convert(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  if (sdt == ddt) {
    std::memcpy(dst, src, n * DTypeSize(sdt));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  auto load = [&](int64_t i) {
    switch (sdt) {
      case DType::kBF16:
        return BF16ToF32(s16[i]);
      case DType::kF16:
        return F16ToF32(s16[i]);
      default:
        return s32[i];
    }
  };
  if (ddt == DType::kF32) {
    auto* d = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) if (n >= (1 << 20))
    for (int64_t i = 0; i < n; ++i) d[i] = load(i);
  } else {
    auto* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n >= (1 << 20))
    for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(load(i));
  }
}

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Sets the OpenMP team size for this (engine) thread: omp_set_num_threads is per thread,
// and the engine thread is not necessarily the thread that created the backend.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) { omp_set_num_threads(threads_); }

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string Describe() const override {
    return "cpu (" + std::to_string(threads_) + " threads, simd " + cpu::SimdTargetName() +
           ", oneDNN " + cpu::LinearRunner::IsaName() + ")";
  }

  Buffer Allocate(DType dtype, int64_t rows, int64_t cols) override {
    Tensor t{nullptr, dtype, rows, cols, 0};
    auto mem = AlignedAlloc(static_cast<size_t>(rows * cols) * DTypeSize(dtype));
    t.data = mem.get();
    return Buffer(std::move(mem), t);
  }

  StatusOr<Buffer> Upload(const HostTensor& src, DType dtype) override {
    const int64_t n = src.numel();
    const int64_t rows = src.shape.size() <= 1 ? 1 : src.shape[0];
    const int64_t cols = rows == 0 ? 0 : n / rows;
    const bool ok = src.dtype == dtype ||
                    (IsFloat(src.dtype) && (dtype == DType::kF32 || dtype == DType::kBF16));
    if (!ok) {
      return Unsupported("cannot upload tensor '" + src.name + "' of dtype " +
                         DTypeName(src.dtype) + " as " + DTypeName(dtype));
    }
    Buffer b = Allocate(dtype, rows, cols);
    Convert(src.data, src.dtype, b.t().data, dtype, n);
    return b;
  }

  void CopyFromHost(const void* src, const Tensor& dst) override {
    const size_t es = DTypeSize(dst.dtype);
    if (dst.dense()) {
      std::memcpy(dst.data, src, dst.numel() * es);
      return;
    }
    for (int64_t r = 0; r < dst.rows; ++r) {
      std::memcpy(static_cast<char*>(dst.data) + r * dst.row_stride() * es,
                  static_cast<const char*>(src) + r * dst.cols * es, dst.cols * es);
    }
  }

  void CopyToHostF32(const Tensor& src, float* dst) override {
    const size_t es = DTypeSize(src.dtype);
    for (int64_t r = 0; r < src.rows; ++r) {
      Convert(static_cast<const char*>(src.data) + r * src.row_stride() * es, src.dtype,
              dst + r * src.cols, DType::kF32, src.cols);
    }
  }

  StatusOr<std::unique_ptr<LinearWeight>> PrepareLinear(const HostTensor& weight,
                                                        const HostTensor* bias,
                                                        DType dtype) override {
    omp_set_num_threads(threads_);
    return linear_.Prepare(weight, bias, dtype);
  }
  void Linear(const LinearParams& p) override {
    omp_set_num_threads(threads_);
    linear_.Run(p);
  }
  void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, Tensor out,
                       bool accumulate) override {
    omp_set_num_threads(threads_);
    cpu::EmbeddingGatherKernel(table, ids, n, out, accumulate);
  }
  void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
                 float eps, Tensor out) override {
    omp_set_num_threads(threads_);
    cpu::LayerNormKernel(x, residual, gamma, beta, eps, out);
  }
  void RmsNorm(Tensor residual, const Tensor* delta, const Tensor& weight, float eps, Tensor out,
               int group) override {
    omp_set_num_threads(threads_);
    cpu::RmsNormKernel(residual, delta, weight, eps, out, group);
  }
  void Rope(const RopeParams& p) override {
    omp_set_num_threads(threads_);
    cpu::RopeKernel(p);
  }
  void Attention(const AttentionParams& p) override {
    omp_set_num_threads(threads_);
    if (p.prefix_of != nullptr) return AttentionWithPrefix(p);
    cpu::AttentionKernel(p);
  }

  // Shared-prefix attention by expansion: each sequence with a prefix is copied as its
  // prefix's rows + its own rows, the regular kernel runs over the expanded batch, and the
  // own rows' outputs are copied back. Exactly the full-sequence computation (the kernel is
  // batch invariant); the CPU gains nothing from it, but runs the same batches as CUDA.
  void AttentionWithPrefix(const AttentionParams& p) {
    const int S = p.num_seqs;
    const int32_t* cu = p.cu_seqlens;
    auto prefix_len = [&](int s) {
      const int q = p.prefix_of[s];
      return q < 0 ? 0 : cu[q + 1] - cu[q];
    };
    std::vector<int32_t> ecu = {0};
    int max_len = 0;
    for (int s = 0; s < S; ++s) {
      const int len = cu[s + 1] - cu[s] + prefix_len(s);
      ecu.push_back(ecu.back() + len);
      max_len = std::max(max_len, len);
    }
    const int64_t T = ecu.back();
    auto expand = [&](const Tensor& x, std::vector<float>& buf) {
      buf.resize(static_cast<size_t>(T * x.cols));
      for (int s = 0; s < S; ++s) {
        const int pre = prefix_len(s);
        const int64_t pbase = pre > 0 ? cu[p.prefix_of[s]] : 0;
        for (int j = 0; j < ecu[s + 1] - ecu[s]; ++j) {
          const int64_t src = j < pre ? pbase + j : cu[s] + (j - pre);
          std::memcpy(buf.data() + (ecu[s] + j) * x.cols, x.ptr<float>() + src * x.row_stride(),
                      static_cast<size_t>(x.cols) * sizeof(float));
        }
      }
      return Tensor{buf.data(), DType::kF32, T, x.cols, 0};
    };
    AttentionParams e = p;
    e.q = expand(p.q, eq_);
    e.k = expand(p.k, ek_);
    e.v = expand(p.v, ev_);
    eo_.resize(static_cast<size_t>(T * p.out.cols));
    e.out = Tensor{eo_.data(), DType::kF32, T, p.out.cols, 0};
    e.cu_seqlens = ecu.data();
    e.max_seqlen = max_len;
    e.prefix_of = nullptr;
    cpu::AttentionKernel(e);
    for (int s = 0; s < S; ++s) {
      const int pre = prefix_len(s);
      for (int i = 0; i < cu[s + 1] - cu[s]; ++i) {
        std::memcpy(p.out.ptr<float>() + (cu[s] + i) * p.out.row_stride(),
                    eo_.data() + (ecu[s] + pre + i) * p.out.cols,
                    static_cast<size_t>(p.out.cols) * sizeof(float));
      }
    }
  }
  void Activate(Tensor x, Activation act) override {
    omp_set_num_threads(threads_);
    cpu::ActivateKernel(x, act);
  }
  void GatedActivate(const Tensor& gate_up, Activation act, Tensor out) override {
    omp_set_num_threads(threads_);
    cpu::GatedActivateKernel(gate_up, act, out);
  }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override {
    omp_set_num_threads(threads_);
    cpu::AddKernel(a, b, out);
  }
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override {
    omp_set_num_threads(threads_);
    cpu::GatherRowsKernel(x, rows, n, out);
  }
  void Pool(const PoolParams& p) override {
    omp_set_num_threads(threads_);
    cpu::PoolKernel(p);
  }
  void Synchronize() override {}

 private:
  int threads_;
  std::vector<float> eq_, ek_, ev_, eo_;  // AttentionWithPrefix scratch
  cpu::LinearRunner linear_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const BackendOptions& options) {
  if (options.num_threads < 0) {
    return InvalidArgument("num_threads must be >= 0 (0 = all available cores)");
  }
  const int threads = options.num_threads > 0 ? options.num_threads : AvailableCores();
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
}

}  // namespace sluice
