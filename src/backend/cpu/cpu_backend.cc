#include "backend/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/buffer_pool.h"
#include "backend/cpu/cpu_linear.h"
#if defined(__x86_64__)
#include "backend/cpu/gemm_x86.h"
#endif
#include "backend/cpu/kernels.h"
#include "backend/cpu/sampling.h"

namespace sluice {
namespace {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Large buffers are recycled process-wide (buffer_pool.h): a new model version's
// activations reuse pages an unloaded one already faulted in.
std::shared_ptr<void> AlignedAlloc(size_t bytes) { return cpu::BufferPool::Shared(bytes); }

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

// The AMX GEMM's schedule and blocking where the environment changed them.
std::string AmxNote() {
#if defined(__x86_64__)
  const cpu::x86::AmxTuning t = cpu::x86::CurrentAmxTuning(), d{};
  std::string note;
  if (cpu::x86::AmxKernelOverridden()) {
    note +=
        std::string(", amx kernel ") + cpu::x86::AmxKernelName(cpu::x86::CurrentAmxKernel(true));
  }
  if (t.chunk != d.chunk || t.tile_group != d.tile_group || t.l2_bytes != d.l2_bytes) {
    note += ", amx tiles " + std::to_string(t.chunk) + ":" + std::to_string(t.tile_group) + ":" +
            std::to_string(t.l2_bytes >> 10);
  }
  if (cpu::x86::AmxI8TiledA() != cpu::x86::kAmxI8TiledADefault) {
    note += std::string(", amx int8 activations ") + (cpu::x86::AmxI8TiledA() ? "tiles" : "rows");
  }
  return note;
#else
  return "";
#endif
}

// Sets the OpenMP team size for this (engine) thread: omp_set_num_threads is per thread,
// and the engine thread is not necessarily the thread that created the backend.
class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, bool inner_bf16) : threads_(threads), inner_bf16_(inner_bf16) {
    omp_set_num_threads(threads_);
  }
  void SetFewRows(bool few) { linear_.SetFewRows(few); }

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string Describe() const override {
    return "cpu (" + std::to_string(threads_) + " threads, simd " + cpu::SimdTargetName() +
           ", linear " + cpu::LinearRunner::Describe() + ", attention " +
           (cpu::AmxAttentionAvailable() ? "f32, bf16 products on amx" : "f32") +
           ", bf16 models' inner activations " + (inner_bf16_ ? "bf16" : "f32") + AmxNote() + ")";
  }
  std::string DescribeLinearWeights() const override { return linear_.DescribePrepared(); }

  DType InnerActivationDType(DType weight_dtype) const override {
    // int8 models too: the bf16 rounding (2^-9 relative) is far below the per-token int8
    // quantisation step of the GEMM that reads them (2^-7 of the row's largest value), and
    // their attention already multiplies in bf16 (AttentionProducts).
    const bool low = weight_dtype == DType::kBF16 || weight_dtype == DType::kI8;
    return low && inner_bf16_ ? DType::kBF16 : DType::kF32;
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
    cpu::AttentionKernel(p);
  }
  void WriteKv(const KvWriteParams& p) override {
    const size_t kb = static_cast<size_t>(p.k.cols) * DTypeSize(p.k.dtype);
    const size_t vb = static_cast<size_t>(p.v.cols) * DTypeSize(p.v.dtype);
    const int64_t ek = DTypeSize(p.k.dtype), ev = DTypeSize(p.v.dtype);
    for (int64_t i = 0; i < p.k.rows; ++i) {
      const int64_t slot = p.slots[i];
      std::memcpy(static_cast<char*>(p.k_cache.data) + slot * p.k_cache.row_stride() * ek,
                  static_cast<const char*>(p.k.data) + i * p.k.row_stride() * ek, kb);
      std::memcpy(static_cast<char*>(p.v_cache.data) + slot * p.v_cache.row_stride() * ev,
                  static_cast<const char*>(p.v.data) + i * p.v.row_stride() * ev, vb);
    }
  }
  void CopyKvBlocks(const KvCopyParams& p) override {
    for (const Tensor& c : *p.caches) {
      const size_t row = static_cast<size_t>(c.row_stride()) * DTypeSize(c.dtype);
      for (int i = 0; i < p.num_blocks; ++i) {
        std::memcpy(
            static_cast<char*>(c.data) + static_cast<size_t>(p.dst[i]) * p.block_size * row,
            static_cast<const char*>(c.data) + static_cast<size_t>(p.src[i]) * p.block_size * row,
            p.block_size * row);
      }
    }
  }
  void Sample(const SampleParams& p) override {
    omp_set_num_threads(threads_);
    cpu::SampleRows(p);
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
  bool inner_bf16_;
  cpu::LinearRunner linear_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const BackendOptions& options) {
  if (options.num_threads < 0) {
    return InvalidArgument("num_threads must be >= 0 (0 = all available cores)");
  }
  if (const std::string mode = cpu::AttentionMode(); mode != "auto" && mode != "f32") {
    return InvalidArgument("SLUICE_CPU_ATTENTION=" + mode + ": expected auto or f32");
  }
  // SLUICE_CPU_ACTIVATIONS: "auto" (unset: bf16 inner activations next to bf16 weights) or
  // "f32" (every activation f32, as before bf16 activations existed; for comparisons).
  const char* acts = std::getenv("SLUICE_CPU_ACTIVATIONS");
  const std::string act_mode = acts != nullptr && *acts != '\0' ? acts : "auto";
  if (act_mode != "auto" && act_mode != "f32") {
    return InvalidArgument("SLUICE_CPU_ACTIVATIONS=" + act_mode + ": expected auto or f32");
  }
#if defined(__x86_64__)
  // SLUICE_CPU_AMX_KERNEL (1x4 | 2x2 | 2x2pf) and SLUICE_CPU_AMX_TILES (CHUNK:GROUP:L2KB):
  // the AMX GEMM's tile schedule and blocking (gemm_x86.h; the same bits whatever they are),
  // process-wide, for comparisons. Unset or empty: the defaults.
  if (const char* k = std::getenv("SLUICE_CPU_AMX_KERNEL"); k != nullptr && *k != '\0') {
    const std::string v = k;
    const cpu::x86::AmxKernel kernels[] = {cpu::x86::AmxKernel::k1x4, cpu::x86::AmxKernel::k2x2,
                                           cpu::x86::AmxKernel::k2x2Prefetch};
    bool found = false;
    for (auto kernel : kernels) {
      if (v == cpu::x86::AmxKernelName(kernel)) {
        cpu::x86::SetAmxKernelForTesting(kernel);
        found = true;
      }
    }
    if (!found)
      return InvalidArgument("SLUICE_CPU_AMX_KERNEL=" + v + ": expected 1x4, 2x2 or 2x2pf");
  }
  // SLUICE_CPU_AMX_INT8_A (rows | tiles): the int8 AMX kernel's activation layout
  // (gemm_x86.h AmxI8TiledA; the same bits either way).
  if (const char* a = std::getenv("SLUICE_CPU_AMX_INT8_A"); a != nullptr && *a != '\0') {
    const std::string v = a;
    if (v != "rows" && v != "tiles") {
      return InvalidArgument("SLUICE_CPU_AMX_INT8_A=" + v + ": expected rows or tiles");
    }
    cpu::x86::SetAmxI8TiledAForTesting(v == "tiles");
  }
  if (const char* t = std::getenv("SLUICE_CPU_AMX_TILES"); t != nullptr && *t != '\0') {
    cpu::x86::AmxTuning tune;
    if (!cpu::x86::ParseAmxTuning(t, &tune) || !tune.epilogue) {
      return InvalidArgument(std::string("SLUICE_CPU_AMX_TILES=") + t +
                             ": expected CHUNK:GROUP:L2KB (e.g. 128:4:1024: K chunk in 4-byte "
                             "groups, a multiple of 16; 1-8 row tiles; weight KiB per tile)");
    }
    cpu::x86::SetAmxTuningForTesting(tune);
  }
#endif
  const int threads = options.num_threads > 0 ? options.num_threads : AvailableCores();
  auto b = std::make_unique<CpuBackend>(threads, act_mode == "auto");
  b->SetFewRows(options.cpu_few_rows);
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace sluice
