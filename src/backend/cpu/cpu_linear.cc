#include "backend/cpu/cpu_linear.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/kernels.h"
#include "backend/host_convert.h"
#include "core/log.h"

namespace sluice::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

constexpr int64_t kMaxChunk = 8192;    // largest M per primitive call
constexpr int64_t kPadAllBelow = 256;  // below this, pad the whole remainder at once
constexpr int64_t kPrepackM = 256;     // M used to ask oneDNN for its preferred layout

int64_t FloorPow2(int64_t m) {
  int64_t p = 1;
  while (p * 2 <= m) p *= 2;
  return p;
}
// Bucket granularity: 1/8 of the octave, at least 16 rows.
int64_t Granularity(int64_t m) { return std::max<int64_t>(16, FloorPow2(m) / 8); }
// Largest bucket <= m (m >= 16).
int64_t BucketFloor(int64_t m) {
  int64_t g = Granularity(m);
  return m / g * g;
}

struct Step {
  int64_t r0, rows, bucket;  // rows [r0, r0 + rows) run as a primitive of M = bucket
};

// Chunks of kMaxChunk rows, then bucket-sized direct calls, then one padded tail.
void MakePlan(int64_t m, std::vector<Step>* plan) {
  plan->clear();
  for (int64_t r0 = 0; r0 < m;) {
    const int64_t rem = m - r0;
    int64_t rows = rem, bucket = rem;
    if (rem >= kMaxChunk) {
      rows = bucket = kMaxChunk;
    } else if (rem == LinearRunner::BucketFor(rem)) {
      // exact bucket
    } else if (rem > kPadAllBelow) {
      rows = bucket = BucketFloor(rem);
    } else {
      bucket = LinearRunner::BucketFor(rem);
    }
    plan->push_back({r0, rows, bucket});
    r0 += rows;
  }
}

struct Counters {
  std::atomic<int64_t> created{0}, hits{0}, pd_ns{0}, prim_ns{0};
};
Counters g_counters;
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Primitive {
  dnnl::matmul prim;
  dnnl::memory src, dst;
};

// Which kernel runs a weight: fixed at Prepare for every M, so that a row's result never
// depends on the batch it is in.
enum class Path { kOneDnn, kHwy, kAvx512Bf16, kAvx512Fma, kInt8, kAmxBf16, kAmxI8 };

class CpuLinearWeight final : public LinearWeight {
 public:
  Path path = Path::kOneDnn;
  // gemm_x86.h: AVX512-BF16 blocks, or int8 blocks with per-channel scales and sums.
  std::vector<uint16_t> x86_bf16;
  std::vector<int8_t> i8;
  std::vector<float> i8_scale;
  std::vector<int32_t> i8_colsum;
  // sluice's GEMM (gemm.h) instead of oneDNN: packed panels and a zero-padded bias.
  bool own_gemm = false;
  std::vector<float> own_f32;
  std::vector<uint16_t> own_bf16;
  std::vector<float> own_bias;
  dnnl::memory::desc packed_md;
  dnnl::memory packed;
  dnnl::memory bias_mem;
  std::vector<float> bias;
  mutable std::mutex mu;
  mutable std::unordered_map<uint64_t, Primitive> cache;
};

dnnl::algorithm EltwiseAlg(Activation act) {
  switch (act) {
    case Activation::kGeluErf:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::kSilu:
      return dnnl::algorithm::eltwise_swish;
    case Activation::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::kQuickGelu:  // swish with alpha 1.702
      return dnnl::algorithm::eltwise_swish;
    case Activation::kNone:
      break;
  }
  return dnnl::algorithm::undef;
}

dnnl::primitive_attr MakeAttr(Activation act, bool sum) {
  dnnl::post_ops po;
  if (act != Activation::kNone) {
    // swish(x) = x * sigmoid(alpha * x): alpha = 1 gives SiLU. relu alpha = 0.
    float alpha = act == Activation::kSilu ? 1.f : act == Activation::kQuickGelu ? 1.702f : 0.f;
    po.append_eltwise(1.f, EltwiseAlg(act), alpha, 0.f);
  }
  if (sum) po.append_sum(1.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  return attr;
}

// Copies `rows` rows of `cols` elements of `elem` bytes between strided matrices.
void CopyRows(const void* src, int64_t lds, void* dst, int64_t ldd, int64_t rows, int64_t cols,
              size_t elem) {
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + r * ldd * elem, s + r * lds * elem, cols * elem);
  }
}

// oneDNN's matmul is used only where it has a brgemm kernel for the dtype: its K reduction
// order does not depend on M. Elsewhere (oneDNN 2.6 on AVX2: gemm:jit for f32, nothing for
// bf16) sluice's own GEMM runs. SLUICE_CPU_LINEAR=onednn|sluice forces one.
bool OneDnnHasBrgemm(DType dtype) {
  auto probe = [](dt cdt) {
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::memory::desc src_md(dims{kPrepackM, 256}, cdt, tag::ab);
      dnnl::memory::desc w_md(dims{256, 256}, cdt, tag::any);
      dnnl::memory::desc dst_md(dims{kPrepackM, 256}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_md, dst_md), eng);
      return std::strncmp(pd.impl_info_str(), "brg", 3) == 0;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool f32 = probe(dt::f32);
  static const bool bf16 = probe(dt::bf16);
  return dtype == DType::kBF16 ? bf16 : f32;
}

std::string IsaNameImpl() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "other";
  }
}

std::string g_path_override;  // SetPathForTesting

std::string PathMode() {
  if (!g_path_override.empty()) return g_path_override;
  const char* env = std::getenv("SLUICE_CPU_LINEAR");
  return env ? env : "auto";
}

// int8 always runs gemm_x86.h's kernels (VNNI/portable, or AMX). Otherwise
// SLUICE_CPU_LINEAR=onednn|sluice|avx512bf16|avx512fma|amx forces a path (avx512*: bf16
// only, and only where the CPU has it; amx: bf16 and int8, only where AMX is usable);
// auto picks, per compute dtype, what docs/benchmarks.md measured fastest at the models'
// shapes.
StatusOr<Path> ChoosePath(DType dtype, bool few_rows = false) {
  const std::string mode = PathMode();
  if (dtype == DType::kI8) {
    if (mode == "amx") {
      if (!x86::AmxI8Usable()) {
        return Unsupported(
            "SLUICE_CPU_LINEAR=amx: this CPU (or SLUICE_CPU_MAX_ISA, or the OS) has no usable "
            "AMX-INT8");
      }
      return Path::kAmxI8;
    }
    // sluice's AMX int8 GEMM for many-row GEMMs (prefill, encoders) where AMX is usable;
    // VNNI for few rows. Measured on the GPU machine's Xeon (docs/benchmarks.md): AMX int8
    // 1.2-2.9x the VNNI kernel at every encoder shape from M = 16, 0.3-0.5x at M = 1.
    if (mode == "auto" && !few_rows && x86::AmxI8Usable()) return Path::kAmxI8;
    return Path::kInt8;
  }
  if (mode == "sluice") return Path::kHwy;
  if (mode == "onednn") return Path::kOneDnn;
  if (mode == "avx512bf16") {
    if (dtype != DType::kBF16) return OneDnnHasBrgemm(dtype) ? Path::kOneDnn : Path::kHwy;
    if (!Features().avx512_bf16) {
      return Unsupported(
          "SLUICE_CPU_LINEAR=avx512bf16: this CPU (or SLUICE_CPU_MAX_ISA) has no "
          "AVX512-BF16");
    }
    return Path::kAvx512Bf16;
  }
  if (mode == "avx512fma") {
    if (dtype != DType::kBF16) return OneDnnHasBrgemm(dtype) ? Path::kOneDnn : Path::kHwy;
    if (!Features().avx512) {
      return Unsupported(
          "SLUICE_CPU_LINEAR=avx512fma: this CPU (or SLUICE_CPU_MAX_ISA) has no "
          "AVX-512");
    }
    return Path::kAvx512Fma;
  }
  if (mode == "amx") {
    if (dtype != DType::kBF16) return OneDnnHasBrgemm(dtype) ? Path::kOneDnn : Path::kHwy;
    if (!x86::AmxBf16Usable()) {
      return Unsupported(
          "SLUICE_CPU_LINEAR=amx: this CPU (or SLUICE_CPU_MAX_ISA, or the OS) has no usable "
          "AMX-BF16");
    }
    return Path::kAmxBf16;
  }
  if (mode != "auto") {
    return InvalidArgument(
        "SLUICE_CPU_LINEAR must be auto, onednn, sluice, avx512bf16, avx512fma or amx, not '" +
        mode + "'");
  }
  // bf16 on AMX machines, many rows: oneDNN's AMX kernel stays the default. Measured on the
  // GPU machine's Xeon (2 cores, docs/benchmarks.md "sluice's AMX GEMM, measured"): sluice's
  // first AMX GEMM (SLUICE_CPU_LINEAR=amx) wins at some encoder shapes (MiniLM, K = 384:
  // 1.2-1.5x at M >= 77) and loses at others (M = 16: 0.5-0.8x; BERT-base qkv / ffn up at
  // M >= 300: 0.7-0.9x), about even over a batch. int8 (above) is where it wins everywhere.
  // bf16 without AMX: sluice's AVX-512 FMA kernel measured 1.3-1.9x oneDNN 2.6's bf16
  // brgemm at M >= 4 and on par at M = 1 (docs/benchmarks.md, "CPU bf16 kernels"); on
  // AMX machines oneDNN's AMX kernel stays until sluice's AMX GEMM is measured there.
  // Few-row GEMMs (generation): the AVX-512 kernel streams bf16 weights faster than
  // oneDNN's AMX kernel at 1-4 rows on AMX machines too (docs/benchmarks.md).
  if (dtype == DType::kBF16 && Features().avx512 && (IsaNameImpl() != "amx" || few_rows)) {
    return Path::kAvx512Fma;
  }
  return OneDnnHasBrgemm(dtype) ? Path::kOneDnn : Path::kHwy;
}

const char* PathName(Path p) {
  switch (p) {
    case Path::kOneDnn:
      return "oneDNN-brgemm";
    case Path::kHwy:
      return "sluice-gemm";
    case Path::kAvx512Bf16:
      return "sluice-avx512bf16";
    case Path::kAvx512Fma:
      return "sluice-avx512fma";
    case Path::kInt8:
      return "sluice-int8";
    case Path::kAmxBf16:
      return "sluice-amx";
    case Path::kAmxI8:  // "sluice-int8(amx)": the int8 path, on its AMX kernel
      return "sluice-int8";
  }
  return "?";
}

// dst [m, ldd] f32 = bf16 rows of src (row stride lds), columns [k, ldd) zero.
void WidenRows(const uint16_t* src, int64_t lds, int64_t m, int64_t k, float* dst, int64_t ldd) {
#pragma omp parallel for schedule(static) if (m * k >= 65536)
  for (int64_t r = 0; r < m; ++r) {
    float* d = dst + r * ldd;
    WidenRowBf16(src + r * lds, d, k);
    for (int64_t c = k; c < ldd; ++c) d[c] = 0.f;
  }
}

// dst rows (row stride ldd) = bf16 (RNE) of f32 rows of src (row stride lds).
void NarrowRows(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
#pragma omp parallel for schedule(static) if (m * n >= 65536)
  for (int64_t r = 0; r < m; ++r) NarrowRowBf16(src + r * lds, dst + r * ldd, n);
}

}  // namespace

void LinearRunner::SetPathForTesting(const std::string& mode) { g_path_override = mode; }

namespace {
// "int8 sluice-int8(avx512_vnni)": a compute dtype and the kernel that runs it.
std::string KernelName(DType t, Path p) {
  std::string s = std::string(DTypeName(t)) + " " + PathName(p);
  if (p == Path::kOneDnn) s += "(" + IsaNameImpl() + ")";
  if (p == Path::kInt8) s += std::string("(") + x86::I8KernelName() + ")";
  if (p == Path::kAmxI8) s += "(amx)";
  return s;
}
}  // namespace

std::string LinearRunner::Describe() {
  auto one = [](DType t) {
    auto p = ChoosePath(t);
    return p.ok() ? KernelName(t, *p) : std::string(DTypeName(t)) + " unavailable";
  };
  return one(DType::kF32) + ", " + one(DType::kBF16) + ", " + one(DType::kI8);
}

struct LinearRunner::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  std::mutex prepared_mu;
  std::vector<std::pair<std::string, int>> prepared;  // kernel description, weights
  dnnl::stream strm{eng};
  Workspace ws_src;    // bf16 activations / padded f32 tail
  Workspace ws_dst;    // padded output tail
  Workspace ws_scale;  // int8: per-row activation scales
  Workspace ws_wide;   // bf16 activations widened to f32 (kernels without a bf16 input)
  Workspace ws_out;    // f32 output of kernels without a bf16 output, before rounding
  std::vector<Step> plan;
  bool warned = false;

  dnnl::matmul::primitive_desc MakePd(const CpuLinearWeight& w, int64_t m, int64_t lds, int64_t ldd,
                                      const dnnl::memory::desc& wmd,
                                      const dnnl::primitive_attr& attr, bool out16 = false) {
    dt cdt = w.dtype == DType::kBF16 ? dt::bf16 : dt::f32;
    int64_t k = w.in_features, n = w.out_features;
    dnnl::memory::desc src_md(dims{m, k}, cdt, dims{lds, 1});
    dnnl::memory::desc dst_md(dims{m, n}, out16 ? dt::bf16 : dt::f32, dims{ldd, 1});
    if (w.has_bias) {
      dnnl::memory::desc bias_md(dims{1, n}, dt::f32, tag::ab);
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wmd, bias_md, dst_md), attr,
                                          eng);
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wmd, dst_md), attr, eng);
  }

  Primitive& Get(const CpuLinearWeight& w, int64_t m, int64_t lds, int64_t ldd, Activation act,
                 bool sum, bool out16) {
    uint64_t key = (static_cast<uint64_t>(m) << 40) ^ (static_cast<uint64_t>(lds) << 20) ^
                   (static_cast<uint64_t>(ldd) << 4) ^ (static_cast<uint64_t>(act) << 1) ^
                   static_cast<uint64_t>(sum) ^ (static_cast<uint64_t>(out16) << 63);
    // Key collisions are impossible for m < 2^24, ld < 2^20.
    std::lock_guard<std::mutex> lock(w.mu);
    auto it = w.cache.find(key);
    if (it != w.cache.end()) {
      g_counters.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
    const int64_t t0 = NowNs();
    auto pd = MakePd(w, m, lds, ldd, w.packed_md, MakeAttr(act, sum), out16);
    const int64_t t1 = NowNs();
    if (!warned && std::strncmp(pd.impl_info_str(), "brg", 3) != 0) {
      warned = true;
      SLUICE_LOG_WARN("oneDNN matmul picked '{}' (not brgemm) for M={} K={} N={}",
                      pd.impl_info_str(), m, w.in_features, w.out_features);
    }
    Primitive p{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), eng, DNNL_MEMORY_NONE),
                dnnl::memory(pd.dst_desc(), eng, DNNL_MEMORY_NONE)};
    g_counters.pd_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    g_counters.prim_ns.fetch_add(NowNs() - t1, std::memory_order_relaxed);
    g_counters.created.fetch_add(1, std::memory_order_relaxed);
    return w.cache.emplace(key, std::move(p)).first->second;
  }

  void Exec(const CpuLinearWeight& w, int64_t m, const void* src, int64_t lds, void* dst,
            int64_t ldd, Activation act, bool sum, bool out16) {
    Primitive& p = Get(w, m, lds, ldd, act, sum, out16);
    p.src.set_data_handle(const_cast<void*>(src));
    p.dst.set_data_handle(dst);
    // C API execute: no per-call std::unordered_map of arguments.
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p.src.get()},
                               {DNNL_ARG_WEIGHTS, w.packed.get()},
                               {DNNL_ARG_DST, p.dst.get()},
                               {DNNL_ARG_BIAS, w.has_bias ? w.bias_mem.get() : nullptr}};
    const dnnl_status_t st =
        dnnl_primitive_execute(p.prim.get(), strm.get(), w.has_bias ? 4 : 3, args);
    if (st != dnnl_success) {
      SLUICE_LOG_ERROR("oneDNN matmul execute failed (status {})", static_cast<int>(st));
    }
    strm.wait();
  }
};

LinearRunner::CacheStats LinearRunner::GetCacheStats() {
  CacheStats s;
  s.created = g_counters.created.load();
  s.hits = g_counters.hits.load();
  s.pd_ms = static_cast<double>(g_counters.pd_ns.load()) * 1e-6;
  s.prim_ms = static_cast<double>(g_counters.prim_ns.load()) * 1e-6;
  return s;
}

LinearRunner::LinearRunner() : impl_(std::make_unique<Impl>()) {}

std::string LinearRunner::IsaName() { return IsaNameImpl(); }
LinearRunner::~LinearRunner() = default;

std::string LinearRunner::DescribePrepared() const {
  std::lock_guard<std::mutex> lock(impl_->prepared_mu);
  std::string out;
  for (const auto& [name, count] : impl_->prepared) {
    out += (out.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  return out;
}

std::string LinearRunner::DescribePlan(int64_t m) {
  std::vector<Step> plan;
  MakePlan(m, &plan);
  std::string out;
  for (const Step& s : plan) {
    if (!out.empty()) out += " + ";
    out += std::to_string(s.rows);
    if (s.rows != s.bucket) out += " (padded to " + std::to_string(s.bucket) + ")";
  }
  return out;
}

int64_t LinearRunner::BucketFor(int64_t m) {
  // Below 16 rows (decode steps) the exact M: padding a one-row GEMV to 16 rows made fp32
  // decode compute-bound (16x the multiply-adds for the same weight traffic). brgemm keeps
  // rows bit-identical across M (tests/unit/backend/linear_test.cc, every M in 1..600).
  if (m < 16) return m;
  int64_t g = Granularity(m);
  return (m + g - 1) / g * g;
}

StatusOr<std::unique_ptr<LinearWeight>> LinearRunner::Prepare(const HostTensor& weight,
                                                              const HostTensor* bias, DType dtype) {
  if (weight.shape.size() != 2 || weight.shape[0] <= 0 || weight.shape[1] <= 0) {
    return InvalidArgument("linear weight '" + weight.name + "' must be 2-D [out, in]");
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kI8) {
    return Unsupported(std::string("CPU linear compute dtype must be f32, bf16 or int8, not ") +
                       DTypeName(dtype));
  }
  ASSIGN_OR_RETURN(const Path path, ChoosePath(dtype, few_rows_));
  auto w = std::make_unique<CpuLinearWeight>();
  const int64_t n = weight.shape[0], k = weight.shape[1];
  w->out_features = n;
  w->in_features = k;
  w->dtype = dtype;
  w->has_bias = bias != nullptr;
  if (bias) {
    if (bias->numel() != n) {
      return InvalidArgument("bias '" + bias->name + "' has " + std::to_string(bias->numel()) +
                             " elements, expected " + std::to_string(n));
    }
    RETURN_IF_ERROR(HostToF32(*bias, &w->bias));
  }

  w->path = path;
  {
    std::lock_guard<std::mutex> lock(impl_->prepared_mu);
    const std::string name = KernelName(dtype, path);
    auto it = std::find_if(impl_->prepared.begin(), impl_->prepared.end(),
                           [&](const auto& e) { return e.first == name; });
    if (it == impl_->prepared.end()) {
      impl_->prepared.emplace_back(name, 1);
      // The portable int8 kernel is a correctness fallback, slower than f32 (docs/models.md):
      // said once, when the first int8 weight lands on it.
      if (path == Path::kInt8 && std::strcmp(x86::I8KernelName(), "portable") == 0) {
        SLUICE_LOG_WARN(
            "int8 runs the portable kernel on this CPU (no AVX512-VNNI or AMX): about 0.15-0.25x "
            "the speed of float32 here; float32 or bfloat16 is faster (docs/models.md, int8)");
      }
    } else {
      ++it->second;
    }
  }
  if (path == Path::kAvx512Bf16 || path == Path::kAvx512Fma || path == Path::kInt8 ||
      path == Path::kAmxBf16 || path == Path::kAmxI8) {
    std::vector<float> wf;
    RETURN_IF_ERROR(HostToF32(weight, &wf));
    if (path != Path::kInt8 && path != Path::kAmxI8) {
      w->x86_bf16.resize(x86::PackedBf16Size(n, k));
      x86::PackBf16(wf.data(), n, k, w->x86_bf16.data());
    } else {
      w->i8.resize(x86::PackedI8Size(n, k));
      w->i8_scale.resize(x86::Blocks(n) * x86::kBlockN);
      w->i8_colsum.resize(x86::Blocks(n) * x86::kBlockN);
      x86::PackI8(wf.data(), n, k, w->i8.data(), w->i8_scale.data(), w->i8_colsum.data());
    }
    return std::unique_ptr<LinearWeight>(std::move(w));
  }
  if (path == Path::kHwy) {
    std::vector<float> wf;
    RETURN_IF_ERROR(HostToF32(weight, &wf));
    w->own_gemm = true;
    if (dtype == DType::kBF16) {
      w->own_bf16.resize(gemm::PackedSize(n, k));
      gemm::PackBF16(wf.data(), n, k, w->own_bf16.data());
    } else {
      w->own_f32.resize(gemm::PackedSize(n, k));
      gemm::PackF32(wf.data(), n, k, w->own_f32.data());
    }
    if (bias) {
      w->own_bias.assign(gemm::Panels(n) * gemm::kPanel, 0.f);
      std::copy(w->bias.begin(), w->bias.end(), w->own_bias.begin());
    }
    return std::unique_ptr<LinearWeight>(std::move(w));
  }

  std::vector<float> wf;
  std::vector<uint16_t> wb;
  void* user_data = nullptr;
  if (dtype == DType::kBF16 && weight.dtype == DType::kBF16) {
    user_data = const_cast<void*>(weight.data);  // read-only use by reorder
  } else {
    RETURN_IF_ERROR(HostToF32(weight, &wf));
    user_data = wf.data();
    if (dtype == DType::kBF16) {
      wb.resize(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBF16(wf[i]);
      user_data = wb.data();
    }
  }
  Impl& im = *impl_;
  const dt cdt = dtype == DType::kBF16 ? dt::bf16 : dt::f32;
  try {
    // Weights as oneDNN sees them: [K, N] with torch's [N, K] storage = tag::ba.
    dnnl::memory::desc user_md(dims{k, n}, cdt, tag::ba);
    dnnl::memory::desc any_md(dims{k, n}, cdt, tag::any);
    auto pd = im.MakePd(*w, kPrepackM, k, n, any_md, MakeAttr(Activation::kNone, false));
    w->packed_md = pd.weights_desc();
    w->packed = dnnl::memory(w->packed_md, im.eng);
    dnnl::memory user_mem(user_md, im.eng, user_data);
    dnnl::reorder(user_mem, w->packed).execute(im.strm, user_mem, w->packed);
    im.strm.wait();
    if (bias) {
      w->bias_mem =
          dnnl::memory(dnnl::memory::desc(dims{1, n}, dt::f32, tag::ab), im.eng, w->bias.data());
    }
  } catch (const dnnl::error& e) {
    return Internal("oneDNN failed to prepare linear weight '" + weight.name + "': " + e.what());
  }
  return std::unique_ptr<LinearWeight>(std::move(w));
}

void LinearRunner::Run(const LinearParams& p) {
  const auto& w = static_cast<const CpuLinearWeight&>(*p.weight);
  const int64_t m = p.x.rows, k = w.in_features, n = w.out_features;
  if (m == 0) return;
  Impl& im = *impl_;
  const bool sum = p.residual != nullptr;
  const bool x16 = p.x.dtype == DType::kBF16, out16 = p.out.dtype == DType::kBF16;
  const bool int8 = w.path == Path::kInt8 || w.path == Path::kAmxI8;
  // bf16 activations in (x) and out: every bf16-weight kernel but sluice's portable GEMM
  // reads and writes them; int8 writes them (and quantises widened rows). The other
  // combinations run in f32 through workspaces, with the same roundings.
  const bool bf16_kernel = w.dtype == DType::kBF16 && !w.own_gemm;
  if ((x16 && !bf16_kernel && !int8) || (out16 && !bf16_kernel && !int8)) {
    LinearParams q = p;
    if (x16) {  // the same row stride: oneDNN's f32 kernel may block differently by stride
      const int64_t ldx = p.x.row_stride();
      float* xf = im.ws_wide.Get<float>(m * ldx);
      WidenRows(p.x.ptr<uint16_t>(), ldx, m, k, xf, ldx);
      q.x = Tensor{xf, DType::kF32, m, k, ldx};
    }
    if (out16) {
      float* of = im.ws_out.Get<float>(m * n);
      if (sum) WidenRows(p.residual->ptr<uint16_t>(), p.residual->row_stride(), m, n, of, n);
      q.out = Tensor{of, DType::kF32, m, n, 0};
      q.residual = sum ? &q.out : nullptr;
    }
    Run(q);
    if (out16) NarrowRows(q.out.ptr<float>(), n, m, n, p.out.ptr<uint16_t>(), p.out.row_stride());
    return;
  }
  const int64_t ldo = p.out.row_stride();
  const size_t oes = DTypeSize(p.out.dtype);
  if (sum && p.residual->data != p.out.data) {
    CopyRows(p.residual->data, p.residual->row_stride(), p.out.data, ldo, m, n, oes);
  }
  float* out = out16 ? nullptr : p.out.ptr<float>();
  uint16_t* out_bf16 = out16 ? p.out.ptr<uint16_t>() : nullptr;

  if (w.path == Path::kAvx512Bf16 || w.path == Path::kAvx512Fma || w.path == Path::kAmxBf16) {
    x86::Bf16Args a;
    const int64_t ldk = 2 * x86::KPairs(k);
    if (w.path != Path::kAvx512Fma) {
      if (x16 && k == ldk) {  // bf16 rows as they are: the kernels read k of each row
        a.x = p.x.data;
        a.ldx = p.x.row_stride();
      } else if (x16) {  // zero-padded copy
        auto* xb = im.ws_src.Get<uint16_t>(m * ldk);
        const auto* xs = p.x.ptr<uint16_t>();
        const int64_t lds = p.x.row_stride();
#pragma omp parallel for schedule(static) if (m * k >= 65536)
        for (int64_t r = 0; r < m; ++r) {
          std::memcpy(xb + r * ldk, xs + r * lds, k * sizeof(uint16_t));
          std::memset(xb + r * ldk + k, 0, (ldk - k) * sizeof(uint16_t));
        }
        a.x = xb;
      } else {
        auto* xb = im.ws_src.Get<uint16_t>(m * ldk);
        x86::ConvertBf16(p.x.ptr<float>(), p.x.row_stride(), m, k, xb);
        a.x = xb;
      }
    } else {
      auto* xr = im.ws_src.Get<float>(m * ldk);
      if (x16) {
        WidenRows(p.x.ptr<uint16_t>(), p.x.row_stride(), m, k, xr, ldk);
      } else {
        x86::RoundBf16(p.x.ptr<float>(), p.x.row_stride(), m, k, xr);
      }
      a.x = xr;
      a.kernel = x86::Bf16Kernel::kFma;
    }
    a.m = m;
    a.k = k;
    a.n = n;
    a.packed = w.x86_bf16.data();
    a.bias = w.has_bias ? w.bias.data() : nullptr;
    a.act = p.act;
    a.sum = sum;
    a.out = out;
    a.out16 = out_bf16;
    a.ldo = ldo;
    if (w.path == Path::kAmxBf16) {
      x86::GemmBf16Amx(a);
    } else {
      x86::GemmBf16(a);
    }
    return;
  }
  if (w.path == Path::kInt8 || w.path == Path::kAmxI8) {
    // The AMX kernel may take its activations in the A-tile layout (gemm_x86.h
    // AmxI8TiledA; the same bits).
    const bool tiles = w.path == Path::kAmxI8 && x86::AmxI8TiledA();
    auto* xq =
        im.ws_src.Get<uint8_t>(tiles ? x86::QuantizedTilesSize(m, k) : m * 4 * x86::KQuads(k));
    float* xs = im.ws_scale.Get<float>(m);
    if (tiles && x16) {
      x86::QuantizeI8Tiles(p.x.ptr<uint16_t>(), p.x.row_stride(), m, k, xq, xs);
    } else if (tiles) {
      x86::QuantizeI8Tiles(p.x.ptr<float>(), p.x.row_stride(), m, k, xq, xs);
    } else if (x16) {
      x86::QuantizeI8(p.x.ptr<uint16_t>(), p.x.row_stride(), m, k, xq, xs);
    } else {
      x86::QuantizeI8(p.x.ptr<float>(), p.x.row_stride(), m, k, xq, xs);
    }
    x86::I8Args a;
    a.x = xq;
    a.x_tiles = tiles;
    a.x_scale = xs;
    a.m = m;
    a.k = k;
    a.n = n;
    a.packed = w.i8.data();
    a.w_scale = w.i8_scale.data();
    a.colsum = w.i8_colsum.data();
    a.bias = w.has_bias ? w.bias.data() : nullptr;
    a.act = p.act;
    a.sum = sum;
    a.out = out;
    a.out16 = out_bf16;
    a.ldo = ldo;
    if (w.path == Path::kAmxI8) {
      x86::GemmI8Amx(a);
    } else {
      x86::GemmI8(a);
    }
    return;
  }
  if (w.own_gemm) {
    gemm::Args a;
    a.x = p.x.ptr<float>();
    a.ldx = p.x.row_stride();
    if (w.dtype == DType::kBF16) {  // activations rounded (RNE) to bf16, kept as f32
      float* xr = im.ws_src.Get<float>(m * k);
      const float* x = a.x;
      const int64_t ldx = a.ldx;
#pragma omp parallel for schedule(static) if (m * k >= 65536)
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < k; ++c) xr[r * k + c] = BF16ToF32(F32ToBF16(x[r * ldx + c]));
      }
      a.x = xr;
      a.ldx = k;
    }
    a.m = m;
    a.k = k;
    a.n = n;
    a.bf16 = w.dtype == DType::kBF16;
    a.packed = a.bf16 ? static_cast<const void*>(w.own_bf16.data())
                      : static_cast<const void*>(w.own_f32.data());
    a.bias = w.has_bias ? w.own_bias.data() : nullptr;
    a.act = p.act;
    a.sum = sum;
    a.out = out;
    a.ldo = ldo;
    gemm::Run(a);
    return;
  }

  std::vector<Step>& plan = im.plan;  // reused: no allocation in steady state
  MakePlan(m, &plan);
  const Step& last = plan.back();

  // Source: dense bf16 rows in place (bf16 activations), a dense bf16 copy of f32 or strided
  // bf16 rows (up to the padded bucket, pad rows zeroed; dense because oneDNN's kernel may
  // block, and round, differently by row stride), or f32 rows in place.
  const void* src = p.x.data;
  int64_t lds = p.x.row_stride();
  size_t elem = DTypeSize(p.x.dtype);
  bool padded = false;  // src already holds the tail's pad rows
  if (w.dtype == DType::kBF16 && (!x16 || lds != k)) {
    const int64_t rows = last.r0 + last.bucket;
    auto* xb = im.ws_src.Get<uint16_t>(rows * k);
    const int64_t ldx = p.x.row_stride();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* d = xb + r * k;
      if (r < m && x16) {
        std::memcpy(d, p.x.ptr<uint16_t>() + r * ldx, k * sizeof(uint16_t));
      } else if (r < m) {
        NarrowRowBf16(p.x.ptr<float>() + r * ldx, d, k);
      } else {
        std::memset(d, 0, k * sizeof(uint16_t));
      }
    }
    src = xb;
    lds = k;
    elem = sizeof(uint16_t);
    padded = true;
  }

  auto* outc = static_cast<char*>(p.out.data);
  for (const Step& s : plan) {
    const char* s_src = static_cast<const char*>(src) + s.r0 * lds * elem;
    if (s.rows == s.bucket) {
      im.Exec(w, s.rows, s_src, lds, outc + s.r0 * ldo * oes, ldo, p.act, sum, out16);
      continue;
    }
    // Padded tail: run a bucket-sized primitive on workspaces.
    int64_t s_lds = lds;
    if (!padded) {
      auto* xp = im.ws_src.Get<char>(s.bucket * k * elem);
      CopyRows(s_src, lds, xp, k, s.rows, k, elem);
      std::memset(xp + s.rows * k * elem, 0, (s.bucket - s.rows) * k * elem);
      s_src = xp;
      s_lds = k;
    }
    auto* op = im.ws_dst.Get<char>(s.bucket * n * oes);
    if (sum) {
      CopyRows(outc + s.r0 * ldo * oes, ldo, op, n, s.rows, n, oes);
      std::memset(op + s.rows * n * oes, 0, (s.bucket - s.rows) * n * oes);
    }
    im.Exec(w, s.bucket, s_src, s_lds, op, n, p.act, sum, out16);
    CopyRows(op, n, outc + s.r0 * ldo * oes, ldo, s.rows, n, oes);
  }
}

}  // namespace sluice::cpu
