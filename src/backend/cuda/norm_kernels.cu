// Normalisation and rotary-embedding kernels of the CUDA backend: LayerNorm, RMSNorm
// (with residual add, whole rows or per-head groups), RoPE and the fused QK-norm + RoPE.
// Deterministic (fixed reduction orders, no atomics): a row's result never depends on the
// other rows of the batch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace sluice::cuda {
namespace {

// One block per row; three passes over global memory (sum, squared deviations, write) so
// any width works and out may alias x or residual (each element is read and written by
// the same thread).
__global__ void LayerNormKernel(const void* x, DType xt, int64_t ldx, const void* res, DType rt,
                                int64_t ldr, const float* gamma, const float* beta, float eps,
                                void* out, DType ot, int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  auto val = [&](int64_t c) {
    return LoadAny(x, xt, r * ldx + c) + (res ? LoadAny(res, rt, r * ldr + c) : 0.f);
  };
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += val(c);
  const float mean = BlockSum(s, sh) / static_cast<float>(n);
  float q = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = val(c) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(BlockSum(q, sh) / static_cast<float>(n) + eps);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    StoreAny(out, ot, r * ldo + c, (val(c) - mean) * rstd * gamma[c] + (beta ? beta[c] : 0.f));
  }
}

// Whole-row RMSNorm: one block per row. The row is kept in registers between the passes
// (up to kRowRegs values per thread), so out may alias residual.
constexpr int kRowRegs = 16;
__global__ void RmsNormRowKernel(void* res, DType rt, int64_t ldr, const void* delta, DType dt,
                                 int64_t ldd, const float* w, float eps, void* out, DType ot,
                                 int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  float vals[kRowRegs];
  float s = 0.f;
  int i = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x, ++i) {
    float v = LoadAny(res, rt, r * ldr + c);
    if (delta) {
      v += LoadAny(delta, dt, r * ldd + c);
      StoreAny(res, rt, r * ldr + c, v);
      v = LoadAny(res, rt, r * ldr + c);  // the stored (rounded) value is what is normalised
    }
    if (i < kRowRegs) vals[i] = v;
    s += v * v;
  }
  const float rs = rsqrtf(BlockSum(s, sh) / static_cast<float>(n) + eps);
  i = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x, ++i) {
    const float v = i < kRowRegs ? vals[i] : LoadAny(res, rt, r * ldr + c);
    StoreAny(out, ot, r * ldo + c, v * rs * w[c]);
  }
}

// Fast whole-row RMSNorm without delta: R residual (f32, or the activation dtype) -> T, one
// warp per row, cols = 128 * NV (NV groups of 4 elements per lane kept in registers),
// 4-element loads and stores.
template <typename R, typename T, int NV>
__global__ void __launch_bounds__(256)
    RmsNormWarpKernel(const R* res, int64_t ldr, const float* w, float eps, T* out, int64_t ldo,
                      int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  constexpr int n = 128 * NV;
  float v[NV][4];
  LoadRowWarp<R, NV>(res + r * ldr, lane, v);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) s += v[i][j] * v[i][j];
  }
  const float rs = rsqrtf(WarpSum(s) / static_cast<float>(n) + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = (i * 32 + lane) * 4;
    float o4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o4[j] = v[i][j] * rs * w[c + j];
    Store<T, 4>(out + r * ldo + c, o4);
  }
}

// Fast whole-row LayerNorm without residual (BERT-family post-norm: the residual rides on
// the preceding GEMM): X -> T, one warp per row, cols = 128 * NV, the row in registers
// (4-element loads), two passes over registers (mean, then the squared deviations) with
// warp reductions, instead of a block per row with two block reductions and three reads.
template <typename X, typename T, int NV>
__global__ void __launch_bounds__(256)
    LayerNormWarpKernel(const X* x, int64_t ldx, const float* __restrict__ gamma,
                        const float* __restrict__ beta, float eps, T* out, int64_t ldo,
                        int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  constexpr int n = 128 * NV;
  float v[NV][4];
  LoadRowWarp<X, NV>(x + r * ldx, lane, v);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) s += v[i][j];
  }
  const float mean = WarpSum(s) / static_cast<float>(n);
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = v[i][j] - mean;
      q += d * d;
    }
  }
  const float rstd = rsqrtf(WarpSum(q) / static_cast<float>(n) + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = (i * 32 + lane) * 4;
    float o4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      o4[j] = (v[i][j] - mean) * rstd * gamma[c + j] + (beta != nullptr ? beta[c + j] : 0.f);
    }
    Store<T, 4>(out + r * ldo + c, o4);
  }
}

// Grouped RMSNorm (per-head QK-norm): one warp per (row, group).
__global__ void RmsNormGroupKernel(void* res, DType rt, int64_t ldr, const void* delta, DType dt,
                                   int64_t ldd, const float* w, float eps, void* out, DType ot,
                                   int64_t ldo, int64_t rows, int64_t groups, int g) {
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (wid >= rows * groups) return;
  const int64_t r = wid / groups, g0 = (wid % groups) * g;
  const int64_t xo = r * ldr + g0;
  float s = 0.f;
  for (int c = lane; c < g; c += 32) {
    float v = LoadAny(res, rt, xo + c);
    if (delta) {
      v += LoadAny(delta, dt, r * ldd + g0 + c);
      StoreAny(res, rt, xo + c, v);
      v = LoadAny(res, rt, xo + c);
    }
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(g) + eps);
  for (int c = lane; c < g; c += 32) {
    StoreAny(out, ot, r * ldo + g0 + c, LoadAny(res, rt, xo + c) * rs * w[c]);
  }
}

// cos/sin of pos * inv_freq[k]: from the table (rows = positions, half entries each) when
// given, else computed (float32 angle as Hugging Face computes it, cos/sin in double for an
// exact rounding; the table holds the same values).
__device__ __forceinline__ float2 CosSin(const float2* table, const float* inv_freq, int pos, int k,
                                         int half) {
  if (table) return table[static_cast<int64_t>(pos) * half + k];
  const double ang = static_cast<double>(static_cast<float>(pos) * inv_freq[k]);
  return make_float2(static_cast<float>(cos(ang)), static_cast<float>(sin(ang)));
}

// The rotation of a pair (xa, xb) by (cos, sin), with the one contraction spelled out so
// that every RoPE kernel rounds alike: xa cos - xb sin, xb cos + xa sin.
__device__ __forceinline__ float RotA(float xa, float xb, float2 cs) {
  return __fmaf_rn(xa, cs.x, -__fmul_rn(xb, cs.y));
}
__device__ __forceinline__ float RotB(float xa, float xb, float2 cs) {
  return __fmaf_rn(xb, cs.x, __fmul_rn(xa, cs.y));
}

__global__ void RopeKernel(void* x, DType xt, int64_t ldx, const int32_t* pos,
                           const float* inv_freq, const float2* table, int64_t rows, int heads,
                           int head_dim, int half, bool neox) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int k = static_cast<int>(i % half);
  const int h = static_cast<int>((i / half) % heads);
  const int64_t t = i / (static_cast<int64_t>(half) * heads);
  const float2 cs = CosSin(table, inv_freq, pos[t], k, half);
  const int64_t xh = t * ldx + static_cast<int64_t>(h) * head_dim;
  const int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
  const float xa = LoadAny(x, xt, xh + a), xb = LoadAny(x, xt, xh + b);
  StoreAny(x, xt, xh + a, RotA(xa, xb, cs));
  StoreAny(x, xt, xh + b, RotB(xa, xb, cs));
}

// Neox-style RoPE over 16-byte chunks, in place: one thread per (token, head, 16 bytes of the
// first half); it rotates those N elements with their partners half away. The same fp32
// arithmetic per element as RopeKernel (table or computed cos/sin, one rounding); n (threads)
// < 2^31.
template <typename T>
__global__ void RopeNeoxVecKernel(T* x, int64_t ldx, const int32_t* pos, const float* inv_freq,
                                  const float2* table, int n, int heads, int head_dim, int half) {
  constexpr int N = 16 / sizeof(T);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int chunks = half / N;
  const int k0 = (i % chunks) * N;
  const int th = i / chunks;  // token * heads + head
  const int h = th % heads, t = th / heads;
  T* xh = x + static_cast<int64_t>(t) * ldx + static_cast<int64_t>(h) * head_dim;
  float a[N], b[N];
  Load<T, N>(xh + k0, a);
  Load<T, N>(xh + k0 + half, b);
  const int p = pos[t];
  float ra[N], rb[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float2 cs = CosSin(table, inv_freq, p, k0 + j, half);
    const float xa = a[j], xb = b[j];
    ra[j] = RotA(xa, xb, cs);
    rb[j] = RotB(xa, xb, cs);
  }
  Store<T, N>(xh + k0, ra);
  Store<T, N>(xh + k0 + half, rb);
}

// Fused per-head RMSNorm + RoPE, in place: one warp per (token, head); the normalised head
// is staged in shared memory (fp32) so the rotation pairs any two elements; one rounding
// to the tensor's dtype at the end.
constexpr int kQkWarps = 8;
__global__ void __launch_bounds__(kQkWarps * 32)
    QkNormRopeKernel(void* x, DType xt, int64_t ldx, const int32_t* pos, const float* w, float eps,
                     const float* inv_freq, const float2* table, int64_t rows, int heads,
                     int head_dim, int half, bool neox) {
  __shared__ float buf[kQkWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t wid = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  if (wid >= rows * heads) return;
  const int64_t t = wid / heads;
  const int h = static_cast<int>(wid % heads);
  const int64_t xo = t * ldx + static_cast<int64_t>(h) * head_dim;
  float* b = buf[warp];
  float s = 0.f;
  for (int c = lane; c < head_dim; c += 32) {
    const float v = LoadAny(x, xt, xo + c);
    b[c] = v;
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(head_dim) + eps);
  __syncwarp();
  for (int c = lane; c < head_dim; c += 32) b[c] = b[c] * rs * w[c];
  __syncwarp();
  const int p = pos[t];
  for (int c = lane; c < head_dim; c += 32) {
    float v = b[c];
    if (c < 2 * half) {
      int k, partner;
      bool first;
      if (neox) {
        first = c < half;
        k = first ? c : c - half;
        partner = first ? c + half : c - half;
      } else {
        first = (c & 1) == 0;
        k = c / 2;
        partner = first ? c + 1 : c - 1;
      }
      const float2 cs = CosSin(table, inv_freq, p, k, half);
      const float o = b[partner];
      v = first ? v * cs.x - o * cs.y : v * cs.x + o * cs.y;
    }
    StoreAny(x, xt, xo + c, v);
  }
}

// Fast path of QkNormRope for neox RoPE over the whole head (Qwen3, Llama...), head_dim =
// 32 * EPL: one warp per token, lane l holds elements [EPL * l, EPL * (l + 1)) of every
// head; the rotation partner of element c (c +- head_dim / 2) sits in lane l ^ 16. The
// token's cos/sin values are loaded once and reused for all of its heads.
template <typename T, int EPL>
__global__ void __launch_bounds__(kQkWarps * 32)
    QkNormRopeNeoxKernel(T* x, int64_t ldx, const int32_t* pos, const float* w, float eps,
                         const float* inv_freq, const float2* table, int64_t rows, int heads) {
  constexpr int D = 32 * EPL, kHalf = D / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  if (t >= rows) return;
  const int c0 = lane * EPL;
  const bool first = lane < 16;
  float wl[EPL], cs[EPL], sn[EPL];
  const int p = pos[t];
#pragma unroll
  for (int j = 0; j < EPL; ++j) {
    wl[j] = w[c0 + j];
    const float2 v = CosSin(table, inv_freq, p, (c0 + j) % kHalf, kHalf);
    cs[j] = v.x;
    sn[j] = first ? -v.y : v.y;  // first half: x*cos - partner*sin
  }
  for (int h = 0; h < heads; ++h) {
    T* xh = x + t * ldx + static_cast<int64_t>(h) * D + c0;
    float v[EPL];
    Load<T, EPL>(xh, v);
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) ss += v[j] * v[j];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = rsqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
    for (int j = 0; j < EPL; ++j) v[j] = v[j] * rs * wl[j];
    float out[EPL];
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const float partner = __shfl_xor_sync(0xffffffffu, v[j], 16);
      out[j] = v[j] * cs[j] + partner * sn[j];
    }
    Store<T, EPL>(xh, out);
  }
}

// The attention inputs of a paged decoder layer (AttentionInputParams): one warp per
// (token, head) over the q heads, the k heads and the v heads. q and k heads get QkNormRope's
// arithmetic (QkNormRopeNeoxKernel's lane layout: lane l holds elements [EPL l, EPL (l + 1)),
// the rotation partner in lane l ^ 16) -- without the norm where kNorm is false --; q is
// written back in place, k to its cache row; v heads are copied to theirs.
struct AttnInArgs {
  void* q;
  int64_t ldq;
  const void* k;
  int64_t ldk;
  const void* v;
  int64_t ldv;
  void* kc;
  int64_t ldkc;
  void* vc;
  int64_t ldvc;
  const int32_t* slots;
  const int32_t* pos;
  const float* q_norm;
  const float* k_norm;
  float eps;
  const float* inv_freq;
  const float2* table;
  int64_t rows;
  int hq, hkv;
};

template <typename T, int EPL, bool kNorm>
__global__ void __launch_bounds__(kQkWarps * 32) AttentionInputsKernel(const AttnInArgs a) {
  constexpr int D = 32 * EPL, kHalf = D / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = a.hq + 2 * a.hkv;
  const int64_t wid = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  PdlTrigger();
  PdlWait();
  if (wid >= a.rows * heads) return;
  const int64_t t = wid / heads;
  const int h = static_cast<int>(wid % heads);
  const int c0 = lane * EPL;
  const int64_t slot = a.slots[t];
  if (h >= a.hq + a.hkv) {  // a v head: into the cache
    const int vh = h - a.hq - a.hkv;
    float v[EPL];
    Load<T, EPL>(static_cast<const T*>(a.v) + t * a.ldv + static_cast<int64_t>(vh) * D + c0, v);
    Store<T, EPL>(static_cast<T*>(a.vc) + slot * a.ldvc + static_cast<int64_t>(vh) * D + c0, v);
    return;
  }
  const bool is_q = h < a.hq;
  const int kh = h - a.hq;
  const T* src = is_q ? static_cast<const T*>(a.q) + t * a.ldq + static_cast<int64_t>(h) * D
                      : static_cast<const T*>(a.k) + t * a.ldk + static_cast<int64_t>(kh) * D;
  float v[EPL];
  Load<T, EPL>(src + c0, v);
  if constexpr (kNorm) {
    const float* w = is_q ? a.q_norm : a.k_norm;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) ss += v[j] * v[j];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = rsqrtf(ss / static_cast<float>(D) + a.eps);
#pragma unroll
    for (int j = 0; j < EPL; ++j) v[j] = v[j] * rs * w[c0 + j];
  }
  const bool first = lane < 16;
  const int p = a.pos[t];
  float out[EPL];
#pragma unroll
  for (int j = 0; j < EPL; ++j) {
    const float2 cs = CosSin(a.table, a.inv_freq, p, (c0 + j) % kHalf, kHalf);
    const float sn = first ? -cs.y : cs.y;  // first half: x*cos - partner*sin
    const float partner = __shfl_xor_sync(0xffffffffu, v[j], 16);
    out[j] = v[j] * cs.x + partner * sn;
  }
  T* dst = is_q ? static_cast<T*>(a.q) + t * a.ldq + static_cast<int64_t>(h) * D
                : static_cast<T*>(a.kc) + slot * a.ldkc + static_cast<int64_t>(kh) * D;
  Store<T, EPL>(dst + c0, out);
}

template <typename R, typename T>
bool RmsNormWarp(const Tensor& res, const Tensor& w, float eps, const Tensor& out,
                 cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((res.rows + 7) / 8);
  const R* r = res.ptr<R>();
  T* o = out.ptr<T>();
  const int64_t ldr = res.row_stride(), ldo = out.row_stride();
  switch (res.cols / 128) {
#define SLUICE_RMS_CASE(NV)                                                          \
  case NV:                                                                           \
    RmsNormWarpKernel<R, T, NV>                                                      \
        <<<blocks, 256, 0, stream>>>(r, ldr, w.ptr<float>(), eps, o, ldo, res.rows); \
    return true;
    SLUICE_RMS_CASE(1)
    SLUICE_RMS_CASE(2)
    SLUICE_RMS_CASE(4)
    SLUICE_RMS_CASE(6)
    SLUICE_RMS_CASE(8)
    SLUICE_RMS_CASE(12)
    SLUICE_RMS_CASE(16)
    SLUICE_RMS_CASE(20)
    SLUICE_RMS_CASE(32)
#undef SLUICE_RMS_CASE
    default:
      return false;
  }
}

// Dispatches LayerNormWarpKernel: rows of 128 * NV columns (NV in the list below), 4-element
// aligned; false (nothing launched) otherwise.
bool LayerNormWarpPath(const Tensor& x, const Tensor& gamma, const Tensor* beta, float eps,
                       const Tensor& out, cudaStream_t stream) {
  if (x.cols % 128 != 0 || !Aligned(x.data, 4 * DTypeSize(x.dtype)) || x.row_stride() % 4 != 0 ||
      !Aligned(out.data, 4 * DTypeSize(out.dtype)) || out.row_stride() % 4 != 0) {
    return false;
  }
  bool done = false;
  const unsigned blocks = static_cast<unsigned>((x.rows + 7) / 8);
  const float* b = beta != nullptr ? beta->ptr<float>() : nullptr;
  WithType(x.dtype, [&](auto xtag) {
    WithType(out.dtype, [&](auto otag) {
      using X = decltype(xtag);
      using T = decltype(otag);
      switch (x.cols / 128) {
#define SLUICE_LN_CASE(NV)                                                                   \
  case NV:                                                                                   \
    LayerNormWarpKernel<X, T, NV>                                                            \
        <<<blocks, 256, 0, stream>>>(x.ptr<X>(), x.row_stride(), gamma.ptr<float>(), b, eps, \
                                     out.ptr<T>(), out.row_stride(), x.rows);                \
    done = true;                                                                             \
    break;
        SLUICE_LN_CASE(1)
        SLUICE_LN_CASE(2)
        SLUICE_LN_CASE(3)
        SLUICE_LN_CASE(4)
        SLUICE_LN_CASE(6)
        SLUICE_LN_CASE(8)
#undef SLUICE_LN_CASE
        default:
          break;
      }
    });
  });
  return done;
}

}  // namespace

bool RmsNormWarpColumns(int64_t cols) {
  if (cols % 128 != 0) return false;
  switch (cols / 128) {
    case 1:
    case 2:
    case 4:
    case 6:
    case 8:
    case 12:
    case 16:
    case 20:
    case 32:
      return true;
    default:
      return false;
  }
}

bool AttentionInputs(const AttentionInputParams& p, const float* inv_freq, const float2* table,
                     cudaStream_t stream) {
  const RopeParams& r = p.q_rope;
  const int D = r.head_dim;
  const int rot = r.rotary_dim > 0 ? r.rotary_dim : D;
  if (r.style != RopeStyle::kNeox || rot != D || (D != 32 && D != 64 && D != 128)) return false;
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) return false;
  const DType dt = r.x.dtype;
  if (p.k.dtype != dt || p.kv.v.dtype != dt || p.kv.k_cache.dtype != dt ||
      p.kv.v_cache.dtype != dt) {
    return false;
  }
  const int epl = D / 32;
  const size_t bytes = static_cast<size_t>(epl) * DTypeSize(dt);
  for (const Tensor* t : {&r.x, &p.k, &p.kv.v, &p.kv.k_cache, &p.kv.v_cache}) {
    if (!Aligned(t->data, bytes) || t->row_stride() % epl != 0) return false;
  }
  const int64_t rows = r.x.rows;
  if (rows == 0) return true;
  AttnInArgs a{r.x.data,
               r.x.row_stride(),
               p.k.data,
               p.k.row_stride(),
               p.kv.v.data,
               p.kv.v.row_stride(),
               p.kv.k_cache.data,
               p.kv.k_cache.row_stride(),
               p.kv.v_cache.data,
               p.kv.v_cache.row_stride(),
               p.kv.slots,
               r.positions,
               p.q_norm != nullptr ? p.q_norm->ptr<float>() : nullptr,
               p.k_norm != nullptr ? p.k_norm->ptr<float>() : nullptr,
               p.eps,
               inv_freq,
               table,
               rows,
               r.num_heads,
               p.num_kv_heads};
  const int64_t warps = rows * (r.num_heads + 2 * p.num_kv_heads);
  const dim3 grid(static_cast<unsigned>((warps + kQkWarps - 1) / kQkWarps));
  const bool norm = p.q_norm != nullptr;
  WithType(dt, [&](auto tag) {
    using T = decltype(tag);
    if (epl == 1) {
      if (norm) {
        LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 1, true>, grid, dim3(kQkWarps * 32),
                  0, stream, a);
      } else {
        LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 1, false>, grid, dim3(kQkWarps * 32),
                  0, stream, a);
      }
    } else if (epl == 2) {
      if (norm) {
        LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 2, true>, grid, dim3(kQkWarps * 32),
                  0, stream, a);
      } else {
        LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 2, false>, grid, dim3(kQkWarps * 32),
                  0, stream, a);
      }
    } else if (norm) {
      LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 4, true>, grid, dim3(kQkWarps * 32), 0,
                stream, a);
    } else {
      LaunchPdl("AttentionInputs", AttentionInputsKernel<T, 4, false>, grid, dim3(kQkWarps * 32), 0,
                stream, a);
    }
  });
  return true;
}

void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out, cudaStream_t stream) {
  if (x.rows == 0) return;
  if (residual == nullptr && LayerNormWarpPath(x, gamma, beta, eps, out, stream)) {
    CheckLaunch("LayerNorm");
    return;
  }
  LayerNormKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(
      x.data, x.dtype, x.row_stride(), residual ? residual->data : nullptr,
      residual ? residual->dtype : DType::kF32, residual ? residual->row_stride() : 0,
      gamma.ptr<float>(), beta ? beta->ptr<float>() : nullptr, eps, out.data, out.dtype,
      out.row_stride(), x.cols);
  CheckLaunch("LayerNorm");
}

void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group, cudaStream_t stream) {
  if (residual.rows == 0) return;
  if (delta == nullptr && group <= 0 && residual.cols % 128 == 0 &&
      Aligned(residual.data, 4 * DTypeSize(residual.dtype)) && residual.row_stride() % 4 == 0 &&
      Aligned(out.data, 4 * DTypeSize(out.dtype)) && out.row_stride() % 4 == 0) {
    bool done = false;
    WithType(residual.dtype, [&](auto rtag) {
      WithType(out.dtype, [&](auto tag) {
        done = RmsNormWarp<decltype(rtag), decltype(tag)>(residual, weight, eps, out, stream);
      });
    });
    if (done) {
      CheckLaunch("RmsNorm");
      return;
    }
  }
  const void* d = delta ? delta->data : nullptr;
  const DType dt = delta ? delta->dtype : DType::kF32;
  const int64_t ldd = delta ? delta->row_stride() : 0;
  if (group <= 0 || group >= residual.cols) {
    RmsNormRowKernel<<<static_cast<unsigned>(residual.rows), kThreads, 0, stream>>>(
        residual.data, residual.dtype, residual.row_stride(), d, dt, ldd, weight.ptr<float>(), eps,
        out.data, out.dtype, out.row_stride(), residual.cols);
  } else {
    const int64_t groups = residual.cols / group;
    RmsNormGroupKernel<<<Blocks(residual.rows * groups * 32), kThreads, 0, stream>>>(
        residual.data, residual.dtype, residual.row_stride(), d, dt, ldd, weight.ptr<float>(), eps,
        out.data, out.dtype, out.row_stride(), residual.rows, groups, group);
  }
  CheckLaunch("RmsNorm");
}

void Rope(const RopeParams& p, const float* inv_freq, const float2* table, cudaStream_t stream) {
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = rot / 2;
  const int64_t n = p.x.rows * p.num_heads * half;
  if (n == 0) return;
  const int vec = 16 / static_cast<int>(DTypeSize(p.x.dtype));
  if (p.style == RopeStyle::kNeox && half % vec == 0 && Aligned(p.x.data, 16) &&
      p.x.row_stride() % vec == 0 && p.head_dim % vec == 0 && n / vec < (int64_t{1} << 31)) {
    const int nv = static_cast<int>(n / vec);
    WithType(p.x.dtype, [&](auto tag) {
      using T = decltype(tag);
      RopeNeoxVecKernel<T><<<Blocks(nv), kThreads, 0, stream>>>(p.x.ptr<T>(), p.x.row_stride(),
                                                                p.positions, inv_freq, table, nv,
                                                                p.num_heads, p.head_dim, half);
    });
    CheckLaunch("Rope");
    return;
  }
  RopeKernel<<<Blocks(n), kThreads, 0, stream>>>(p.x.data, p.x.dtype, p.x.row_stride(), p.positions,
                                                 inv_freq, table, p.x.rows, p.num_heads, p.head_dim,
                                                 half, p.style == RopeStyle::kNeox);
  CheckLaunch("Rope");
}

bool QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps, const float* inv_freq,
                const float2* table, cudaStream_t stream) {
  if (p.head_dim > kMaxHeadDim) return false;
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int64_t n = p.x.rows * p.num_heads;
  if (n == 0) return true;
  const int epl = p.head_dim / 32;
  if (p.style == RopeStyle::kNeox && rot == p.head_dim && (p.head_dim == 64 || p.head_dim == 128) &&
      Aligned(p.x.data, epl * DTypeSize(p.x.dtype)) && p.x.row_stride() % epl == 0) {
    const unsigned blocks = static_cast<unsigned>((p.x.rows + kQkWarps - 1) / kQkWarps);
    WithType(p.x.dtype, [&](auto tag) {
      using T = decltype(tag);
      if (epl == 2) {
        QkNormRopeNeoxKernel<T, 2><<<blocks, kQkWarps * 32, 0, stream>>>(
            p.x.ptr<T>(), p.x.row_stride(), p.positions, norm_weight.ptr<float>(), eps, inv_freq,
            table, p.x.rows, p.num_heads);
      } else {
        QkNormRopeNeoxKernel<T, 4><<<blocks, kQkWarps * 32, 0, stream>>>(
            p.x.ptr<T>(), p.x.row_stride(), p.positions, norm_weight.ptr<float>(), eps, inv_freq,
            table, p.x.rows, p.num_heads);
      }
    });
    CheckLaunch("QkNormRope");
    return true;
  }
  QkNormRopeKernel<<<static_cast<unsigned>((n + kQkWarps - 1) / kQkWarps), kQkWarps * 32, 0,
                     stream>>>(p.x.data, p.x.dtype, p.x.row_stride(), p.positions,
                               norm_weight.ptr<float>(), eps, inv_freq, table, p.x.rows,
                               p.num_heads, p.head_dim, rot / 2, p.style == RopeStyle::kNeox);
  CheckLaunch("QkNormRope");
  return true;
}

}  // namespace sluice::cuda
