// The CUDA backend: device memory, host<->device copies, cuBLASLt linear layers and the
// kernels of kernels.cu, norm_kernels.cu, attention.cu, attention_tc.cu, all queued on one stream
// per backend.
//
// Linear: y = act(x·W^T + b) (+ residual). W is stored [N, K] in the compute dtype (f32,
// bf16 or f16). Activations in another dtype than the weights are converted in a workspace
// first (models keep GEMM inputs in ActivationDType(), so this only happens for f32
// residual-stream inputs such as BERT's LayerNorm output); accumulation is fp32 and the
// output is written in the dtype of `out` (f32, or bf16/f16). fp32 GEMMs use no TF32 unless
// BackendOptions::allow_tf32. The bias (and ReLU) run in cuBLASLt's epilogue, a residual
// without activation through beta = 1; GELU/SiLU (cuBLASLt's GELU is the tanh form) and
// residual-after-activation run in one fused element-wise kernel.
//
// Batch invariance: the cuBLASLt algorithm is chosen per (shape, strides, alignment) and
// never uses split-K when an alternative exists, so a row's reduction order is fixed within
// a GEMM (duplicates bit-identical); across batch sizes the algorithm may differ (rows then
// differ within fp32 rounding). All other kernels are per-row deterministic.
//
// Asynchronous execution: AllocateHost gives pinned memory, copies from/to it are queued on
// the stream, fences are CUDA events. Recordings (CUDA graphs) capture the stream between
// attention calls (stream capture, relaxed mode) into instantiated graph segments; replay
// launches the segments and runs each attention call eagerly with the replay's shape.
#include "backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/backend_objects.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemm_planner.h"
#include "backend/cuda/kernels.h"

namespace sluice {
namespace {

using cuda::CudaType;
using cuda::GemmKey;
using cuda::GemmOperands;
using cuda::GemmPlan;
using cuda::Scratch;

using cuda::Alignment;
using cuda::ConvertHost;
using cuda::CudaFence;
using cuda::CudaLinearWeight;
using cuda::CudaRecording;
using cuda::IsFloat;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool tf32, bool batch_invariant)
      : device_(device), tf32_(tf32), invariant_(batch_invariant) {
    CUDA_OK(cudaSetDevice(device_));
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BLAS_OK(cublasLtCreate(&lt_));
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, device_));
    describe_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ", sm_" +
                std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                std::to_string(prop.totalGlobalMem >> 30) + " GiB" + (tf32_ ? ", tf32" : "") +
                (invariant_ ? ", batch invariant" : "") + ")";
    num_sms_ = prop.multiProcessorCount;
    // SLUICE_CUDA_GEMV=0: decode-sized GEMMs on cuBLASLt too (A/B measurements).
    const char* gv = std::getenv("SLUICE_CUDA_GEMV");
    // Batch invariant: no GEMV (its K order differs from the GEMMs') and so no fused blocks.
    gemv_ = !(gv && std::string(gv) == "0") && !invariant_;
    // SLUICE_CUDA_GRAPH_ATTENTION=0: recordings leave all attention calls eager (A/B runs).
    const char* ga = std::getenv("SLUICE_CUDA_GRAPH_ATTENTION");
    graph_attention_ = !(ga && std::string(ga) == "0");
    gemm_ws_ = blas_ws_.Get(kGemmWorkspace, false);
    // SLUICE_CUDA_GEMM_SMALL=tune: GEMMs under 1024 rows time the heuristic's candidates
    // (split-K included) per M bucket instead of taking its first choice (gemm_planner.h).
    const char* gs = std::getenv("SLUICE_CUDA_GEMM_SMALL");
    const bool small_tune = gs && std::string(gs) == "tune";
    gemm_ =
        std::make_unique<cuda::GemmPlanner>(lt_, stream_, tf32_, gemm_ws_, invariant_, small_tune);
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (recording_) {  // abandoned mid-recording: end the capture, drop what it holds
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
      cudaGetLastError();
    }
    cudaStreamSynchronize(stream_);
    if (side_stream_) {
      cudaStreamSynchronize(side_stream_);
      cudaEventDestroy(staged_event_);
      cudaEventDestroy(sample_done_);
      cudaStreamDestroy(side_stream_);
    }
    gemm_.reset();  // its plans and events before the handle
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  DType ActivationDType(DType weight_dtype) const override {
    return weight_dtype == DType::kBF16 || weight_dtype == DType::kF16 ? weight_dtype : DType::kF32;
  }
  std::string Describe() const override { return describe_; }

  Buffer Allocate(DType dtype, int64_t rows, int64_t cols) override {
    Device();
    const size_t bytes = std::max<size_t>(256, static_cast<size_t>(rows * cols) * DTypeSize(dtype));
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, bytes));
    std::shared_ptr<void> mem(p, [](void* q) { cudaFree(q); });
    return Buffer(std::move(mem), Tensor{p, dtype, rows, cols, 0});
  }

  StatusOr<Buffer> Upload(const HostTensor& src, DType dtype) override {
    NotRecording("Upload");
    const int64_t n = src.numel();
    const int64_t rows = src.shape.size() <= 1 ? 1 : src.shape[0];
    const int64_t cols = rows == 0 ? 0 : n / rows;
    if (src.dtype != dtype && !(IsFloat(src.dtype) && IsFloat(dtype))) {
      return Unsupported("cannot upload tensor '" + src.name + "' of dtype " +
                         DTypeName(src.dtype) + " as " + DTypeName(dtype));
    }
    Buffer b = Allocate(dtype, rows, cols);
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    if (src.dtype == dtype) {
      CUDA_OK(cudaMemcpyAsync(b.t().data, src.data, bytes, cudaMemcpyHostToDevice, stream_));
    } else {
      std::vector<uint8_t> staged(bytes);
      ConvertHost(src.data, src.dtype, staged.data(), dtype, n);
      CUDA_OK(cudaMemcpyAsync(b.t().data, staged.data(), bytes, cudaMemcpyHostToDevice, stream_));
    }
    CUDA_OK(cudaStreamSynchronize(stream_));
    return b;
  }

  void CopyFromHost(const void* src, const Tensor& dst) override {
    Device();
    if (dst.numel() == 0) return;
    // From pageable memory the call returns once `src` has been consumed, so the caller
    // may free it right away; the copy stays ordered on the stream.
    const size_t es = DTypeSize(dst.dtype);
    CUDA_OK(cudaMemcpy2DAsync(dst.data, dst.row_stride() * es, src, dst.cols * es, dst.cols * es,
                              dst.rows, cudaMemcpyHostToDevice, stream_));
  }

  void CopyToHostF32(const Tensor& src, float* dst) override {
    NotRecording("CopyToHostF32");
    CopyToHostF32Async(src, dst);
    CUDA_OK(cudaStreamSynchronize(stream_));
  }

  HostBuffer AllocateHost(size_t bytes) override {
    Device();
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 64);
    CUDA_OK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    return HostBuffer(std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }), n);
  }

  void CopyFromHostAsync(const void* src, const Tensor& dst) override {
    // The same call as CopyFromHost: from pinned memory it returns before the copy runs.
    CopyFromHost(src, dst);
  }

  void CopyToHostF32Async(const Tensor& src, float* dst) override {
    Device();
    if (src.numel() == 0) return;
    if (src.dtype == DType::kF32) {
      CUDA_OK(cudaMemcpy2DAsync(dst, src.cols * sizeof(float), src.data,
                                src.row_stride() * sizeof(float), src.cols * sizeof(float),
                                src.rows, cudaMemcpyDeviceToHost, stream_));
    } else {
      auto* tmp = static_cast<float*>(copy_ws_.Get(src.numel() * sizeof(float), kept_));
      cuda::ToF32(src, tmp, stream_);
      CUDA_OK(
          cudaMemcpyAsync(dst, tmp, src.numel() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
  }

  bool asynchronous() const override { return true; }
  std::unique_ptr<Fence> CreateFence() override {
    return std::make_unique<CudaFence>(device_, stream_);
  }

  int64_t DeviceMemoryFree() override {
    Device();
    size_t free = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(free);
  }
  int64_t DeviceMemoryTotal() override {
    Device();
    size_t free = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(total);
  }

  StatusOr<std::unique_ptr<LinearWeight>> PrepareLinear(const HostTensor& weight,
                                                        const HostTensor* bias,
                                                        DType dtype) override {
    if (!IsFloat(dtype)) {
      return Unsupported(std::string("linear compute dtype ") + DTypeName(dtype) +
                         " is not supported on CUDA (f32, bf16, f16)");
    }
    if (weight.shape.size() != 2) return InvalidArgument(weight.name + ": linear weight not 2-D");
    auto lw = std::make_unique<CudaLinearWeight>();
    lw->out_features = weight.shape[0];
    lw->in_features = weight.shape[1];
    lw->dtype = dtype;
    ASSIGN_OR_RETURN(lw->w, Upload(weight, dtype));
    if (bias) {
      if (bias->numel() != lw->out_features) return InvalidArgument(bias->name + ": bias size");
      ASSIGN_OR_RETURN(lw->bias, Upload(*bias, DType::kF32));
      if (dtype != DType::kF32) {
        ASSIGN_OR_RETURN(lw->bias_half, Upload(*bias, dtype));
      }
      lw->has_bias = true;
    }
    return std::unique_ptr<LinearWeight>(std::move(lw));
  }

  void Linear(const LinearParams& p) override {
    Device();
    const auto& w = *static_cast<const CudaLinearWeight*>(p.weight);
    const int64_t m = p.x.rows, n = w.out_features, k = w.in_features;
    if (m == 0) return;
    // B operand (activations) in the weight dtype: as is, or converted (rounded).
    const void* xb = p.x.data;
    int64_t ldb = p.x.row_stride();
    if (p.x.dtype != w.dtype) {
      void* conv = xconv_ws_.Get(static_cast<size_t>(m * k) * DTypeSize(w.dtype), kept_);
      cuda::Convert(p.x, conv, w.dtype, stream_);
      xb = conv;
      ldb = k;
    }
    const bool act = p.act != Activation::kNone;
    if (gemv_ && !act && m <= cuda::kGemvMaxRows &&
        (!p.residual || p.residual->dtype == p.out.dtype)) {
      cuda::GemvParams g;
      g.w = w.w.t().data;
      g.w_dtype = w.dtype;
      g.m = m;
      g.n = n;
      g.k = k;
      g.x = xb;
      g.x_dtype = w.dtype;
      g.ldx = ldb;
      g.bias = w.has_bias ? static_cast<const float*>(w.bias.t().data) : nullptr;
      g.residual = p.residual ? p.residual->data : nullptr;
      g.ldr = p.residual ? p.residual->row_stride() : 0;
      g.out = p.out.data;
      g.ldo = p.out.row_stride();
      g.out_dtype = p.out.dtype;
      if (cuda::GemvEligible(g)) {
        cuda::Gemv(g, stream_);
        return;
      }
    }
    const bool relu_epi = p.act == Activation::kRelu && !p.residual;
    // Where the GEMM writes, and whether the residual rides on beta (C = residual needs the
    // same dtype as D); otherwise the GEMM writes f32 scratch and one element-wise pass
    // finishes act(.) + residual into `out`.
    Tensor d = p.out;
    const Tensor* c = nullptr;
    if (p.residual && !act && p.residual->dtype == p.out.dtype) {
      c = p.residual;
    } else if (p.residual) {
      d = Tensor{yws_.Get(static_cast<size_t>(m * n) * sizeof(float), kept_), DType::kF32, m, n, 0};
    }
    const void* bias = w.has_bias ? w.bias.t().data : nullptr;
    // A half output takes the bias in its own dtype in the epilogue: cuBLASLt's kernels for
    // an f32 bias next to a half output ran the BERT-base projections at ~230 TFLOP/s.
    const bool half_bias = bias && d.dtype == w.dtype && w.dtype != DType::kF32;
    const void* epi_bias = half_bias ? w.bias_half.t().data : bias;
    int epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (bias)
      epi = relu_epi ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (relu_epi)
      epi = CUBLASLT_EPILOGUE_RELU;
    const void* cptr = c ? c->data : d.data;
    const int64_t ldc = c ? c->row_stride() : d.row_stride();
    GemmKey key{m,
                n,
                k,
                ldb,
                ldc,
                d.row_stride(),
                static_cast<int>(w.dtype),
                static_cast<int>(d.dtype),
                epi,
                c != nullptr,
                Alignment(w.w.t().data),
                Alignment(xb),
                Alignment(cptr),
                Alignment(d.data),
                static_cast<int>(half_bias ? w.dtype : DType::kF32)};
    const GemmOperands ops{w.w.t().data, xb, cptr, d.data, c ? 1.f : 0.f};
    const GemmPlan* plan = gemm_->Plan(key, epi_bias, ops, !recording_);
    bool epilogue_done = true;
    if (!plan->ok && epi != CUBLASLT_EPILOGUE_DEFAULT) {  // no algorithm with that epilogue
      key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      plan = gemm_->Plan(key, nullptr, ops, !recording_);
      epilogue_done = false;
    }
    if (!plan->ok) {
      std::fprintf(stderr, "sluice cuda: no cuBLASLt algorithm for a %ldx%ldx%ld %s GEMM\n",
                   static_cast<long>(m), static_cast<long>(n), static_cast<long>(k),
                   DTypeName(w.dtype));
      std::abort();
    }
    if (plan->ok && epilogue_done && bias) {
      BLAS_OK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                             &epi_bias, sizeof(epi_bias)));
    }
    const float alpha = 1.f, beta = c ? 1.f : 0.f;
    BLAS_OK(cublasLtMatmul(lt_, plan->desc, &alpha, w.w.t().data, plan->a, xb, plan->b, &beta, cptr,
                           plan->c, d.data, plan->d, &plan->algo, gemm_ws_, kGemmWorkspace,
                           stream_));
    const bool need_bias = bias && !epilogue_done;
    const bool need_act = act && !(relu_epi && epilogue_done);
    const bool need_res = p.residual && c == nullptr;
    if (need_bias || need_act || need_res) {
      // out = act(d + bias) + residual, for whatever the GEMM did not do.
      cuda::BiasActResidual(d, need_bias ? static_cast<const float*>(bias) : nullptr,
                            need_act ? p.act : Activation::kNone, need_res ? p.residual : nullptr,
                            p.out, stream_);
    }
  }

  // Decode batches (M <= kGemvMaxRows): the RMSNorm prologue and the SiLU-gated epilogue run
  // inside the GEMV kernel; everything else as separate operations.
  void LinearBlock(const LinearBlockParams& p) override {
    Device();
    const auto& w = *static_cast<const CudaLinearWeight*>(p.weight);
    const int64_t m = p.x.rows;
    const bool fusable = p.norm_weight != nullptr || p.gate != Activation::kNone;
    if (gemv_ && fusable && m >= 1 && m <= cuda::kGemvMaxRows &&
        (!p.residual || p.residual->dtype == p.out.dtype)) {
      cuda::GemvParams g;
      g.w = w.w.t().data;
      g.w_dtype = w.dtype;
      g.m = m;
      g.n = w.out_features;
      g.k = w.in_features;
      g.x = p.x.data;
      g.x_dtype = p.x.dtype;
      g.ldx = p.x.row_stride();
      g.norm_weight = p.norm_weight ? p.norm_weight->ptr<float>() : nullptr;
      g.eps = p.eps;
      g.gate = p.gate;
      g.bias = w.has_bias ? static_cast<const float*>(w.bias.t().data) : nullptr;
      g.residual = p.residual ? p.residual->data : nullptr;
      g.ldr = p.residual ? p.residual->row_stride() : 0;
      g.out = p.out.data;
      g.ldo = p.out.row_stride();
      g.out_dtype = p.out.dtype;
      if (cuda::GemvEligible(g)) {
        cuda::Gemv(g, stream_);
        return;
      }
    }
    Backend::LinearBlock(p);
  }
  void AttentionInputs(const AttentionInputParams& p) override {
    Device();
    if (!cuda::AttentionInputs(p, InvFreq(p.q_rope), CosSinTable(p.q_rope), stream_)) {
      Backend::AttentionInputs(p);
    }
  }

  void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, Tensor out,
                       bool accumulate) override {
    Device();
    cuda::EmbeddingGather(table, ids, n, out, accumulate, stream_);
  }
  void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
                 float eps, Tensor out) override {
    Device();
    cuda::LayerNorm(x, residual, gamma, beta, eps, out, stream_);
  }
  void RmsNorm(Tensor residual, const Tensor* delta, const Tensor& weight, float eps, Tensor out,
               int group) override {
    Device();
    cuda::RmsNorm(residual, delta, weight, eps, out, group, stream_);
  }
  void Rope(const RopeParams& p) override {
    Device();
    cuda::Rope(p, InvFreq(p), CosSinTable(p), stream_);
  }
  void QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps) override {
    Device();
    if (!cuda::QkNormRope(p, norm_weight, eps, InvFreq(p), CosSinTable(p), stream_)) {
      Backend::QkNormRope(p, norm_weight, eps);
    }
  }
  void Attention(const AttentionParams& p) override {
    Device();
    // One query per sequence: split over the keys (batch invariant: the prefill kernel, whose
    // key order per row is the same whether the row is decoded or recomputed in a chunk).
    if (!invariant_ && cuda::DecodeAttentionEligible(p)) {
      const int splits = cuda::DecodeAttentionSplits(p, num_sms_);
      const size_t bytes = cuda::DecodeAttentionScratch(p, splits);
      if (recording_ && !p.fixed_shape) {
        std::fprintf(stderr, "sluice cuda: decode attention recorded without a fixed shape\n");
        std::abort();
      }
      if (!cuda::DecodeAttention(p, splits, static_cast<float*>(decode_ws_.Get(bytes, kept_)),
                                 DecodeCounters(static_cast<size_t>(p.num_seqs) * p.num_kv_heads),
                                 stream_)) {
        std::fprintf(stderr, "sluice cuda: unsupported decode attention\n");
        std::abort();
      }
      return;
    }
    if (recording_ && !p.fixed_shape) {
      // Captured where the kernel can find each block's sequence on the device.
      if (graph_attention_ && cuda::AttentionTcGraph(p, stream_)) return;
      // Not captured: close the segment, run it eagerly.
      EndSegment();
      rec_->steps.push_back({nullptr, p});
      BeginSegment();
      return;
    }
    // (Recording with a fixed shape: the launch is captured with the graph.)
    if (!cuda::Attention(p, stream_)) {
      std::fprintf(stderr,
                   "sluice cuda: unsupported attention (head_dim %d, max %d; f32 q/k/v/out; "
                   "num_heads %% num_kv_heads == 0)\n",
                   p.head_dim, cuda::kMaxHeadDim);
      std::abort();
    }
  }
  void WriteKv(const KvWriteParams& p) override {
    Device();
    cuda::WriteKv(p, stream_);
  }
  void CopyKvBlocks(const KvCopyParams& p) override {
    NotRecording("CopyKvBlocks");
    Device();
    for (const Tensor& c : *p.caches) {
      const size_t bytes = static_cast<size_t>(c.row_stride()) * DTypeSize(c.dtype) * p.block_size;
      for (int i = 0; i < p.num_blocks; ++i) {
        CUDA_OK(cudaMemcpyAsync(static_cast<char*>(c.data) + bytes * p.dst[i],
                                static_cast<const char*>(c.data) + bytes * p.src[i], bytes,
                                cudaMemcpyDeviceToDevice, stream_));
      }
    }
  }
  void Sample(const SampleParams& p) override {
    NotRecording("Sample");
    Device();
    if (p.num_rows == 0) return;
    const size_t rows_bytes = sizeof(SamplingRow) * p.num_rows;
    const size_t adj_bytes = sizeof(SamplingAdjust) * std::max(1, p.num_adjusts);
    const size_t out_bytes = sizeof(SampledToken) * p.num_rows;
    auto* rows = static_cast<SamplingRow*>(sample_rows_.Get(rows_bytes, kept_));
    auto* adj = static_cast<SamplingAdjust*>(sample_adj_.Get(adj_bytes, kept_));
    auto* raw =
        static_cast<float*>(sample_raw_.Get(sizeof(float) * std::max(1, p.num_adjusts), kept_));
    auto* out = static_cast<SampledToken*>(sample_out_.Get(out_bytes, kept_));
    CUDA_OK(cudaMemcpyAsync(rows, p.rows, rows_bytes, cudaMemcpyHostToDevice, stream_));
    if (p.num_adjusts > 0) {
      CUDA_OK(cudaMemcpyAsync(adj, p.adjusts, sizeof(SamplingAdjust) * p.num_adjusts,
                              cudaMemcpyHostToDevice, stream_));
    }
    // Masks and allow-lists: the copies StageSampleInputs started (the sample waits for them
    // on the device), else copied here after the forward.
    const size_t mask_bytes =
        sizeof(uint32_t) * static_cast<size_t>(std::max(0, p.num_masks)) * p.mask_words;
    const size_t ids_bytes = sizeof(int32_t) * static_cast<size_t>(std::max(0, p.num_allowed));
    const bool staged = staged_.valid && staged_.masks == p.masks &&
                        staged_.mask_bytes == mask_bytes && staged_.allowed == p.allowed &&
                        staged_.ids_bytes == ids_bytes;
    staged_.valid = false;
    uint32_t* masks = nullptr;
    int32_t* allowed = nullptr;
    float* allowed_vals = nullptr;
    if (staged) {
      masks = staged_.masks_dev;
      allowed = staged_.allowed_dev;
      CUDA_OK(cudaStreamWaitEvent(stream_, staged_event_, 0));
    } else {
      // (A staged copy not used here may still be writing the buffers.)
      if (side_stream_) CUDA_OK(cudaStreamWaitEvent(stream_, staged_event_, 0));
      if (p.num_masks > 0) {
        masks = static_cast<uint32_t*>(sample_mask_.Get(mask_bytes, kept_));
        CUDA_OK(cudaMemcpyAsync(masks, p.masks, mask_bytes, cudaMemcpyHostToDevice, stream_));
      }
      if (p.num_allowed > 0) {  // sparse allow-lists: the ids only (4 bytes per allowed token)
        allowed = static_cast<int32_t*>(sample_allowed_.Get(ids_bytes, kept_));
        CUDA_OK(cudaMemcpyAsync(allowed, p.allowed, ids_bytes, cudaMemcpyHostToDevice, stream_));
      }
    }
    if (p.num_allowed > 0) {
      allowed_vals = static_cast<float*>(sample_allowed_vals_.Get(ids_bytes, kept_));
    }
    cuda::Sample(p, rows, adj, raw, masks, allowed, allowed_vals, out, stream_);
    CUDA_OK(cudaMemcpyAsync(p.out, out, out_bytes, cudaMemcpyDeviceToHost, stream_));
    if (side_stream_) {  // the device copies are free again once this sample has read them
      CUDA_OK(cudaEventRecord(sample_done_, stream_));
      sample_done_recorded_ = true;
    }
  }
  void StageSampleInputs(const SampleParams& p) override {
    staged_.valid = false;
    if (recording_ || (p.num_masks <= 0 && p.num_allowed <= 0)) return;
    Device();
    if (!side_stream_) {
      CUDA_OK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
      CUDA_OK(cudaEventCreateWithFlags(&staged_event_, cudaEventDisableTiming));
      CUDA_OK(cudaEventCreateWithFlags(&sample_done_, cudaEventDisableTiming));
    }
    // The previous sample may still read the device copies: the copies wait for it (it is
    // queued before the forward now running, so they do not wait for the forward).
    if (sample_done_recorded_) CUDA_OK(cudaStreamWaitEvent(side_stream_, sample_done_, 0));
    Staged s;
    s.masks = p.masks;
    s.allowed = p.allowed;
    s.mask_bytes = sizeof(uint32_t) * static_cast<size_t>(std::max(0, p.num_masks)) * p.mask_words;
    s.ids_bytes = sizeof(int32_t) * static_cast<size_t>(std::max(0, p.num_allowed));
    if (s.mask_bytes > 0) {
      s.masks_dev = static_cast<uint32_t*>(sample_mask_.Get(s.mask_bytes, kept_));
      CUDA_OK(cudaMemcpyAsync(s.masks_dev, p.masks, s.mask_bytes, cudaMemcpyHostToDevice,
                              side_stream_));
    }
    if (s.ids_bytes > 0) {
      s.allowed_dev = static_cast<int32_t*>(sample_allowed_.Get(s.ids_bytes, kept_));
      CUDA_OK(cudaMemcpyAsync(s.allowed_dev, p.allowed, s.ids_bytes, cudaMemcpyHostToDevice,
                              side_stream_));
    }
    CUDA_OK(cudaEventRecord(staged_event_, side_stream_));
    s.valid = true;
    staged_ = s;
  }
  void Activate(Tensor x, Activation act) override {
    Device();
    cuda::Activate(x, act, stream_);
  }
  void GatedActivate(const Tensor& gate_up, Activation act, Tensor out) override {
    Device();
    cuda::GatedActivate(gate_up, act, out, stream_);
  }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override {
    Device();
    cuda::Add(a, b, out, stream_);
  }
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override {
    Device();
    cuda::GatherRows(x, rows, n, out, stream_);
  }
  void Pool(const PoolParams& p) override {
    Device();
    cuda::Pool(p, stream_);
  }
  void Synchronize() override {
    NotRecording("Synchronize");
    Device();
    CUDA_OK(cudaStreamSynchronize(stream_));
  }

  Status BeginRecording() override {
    if (recording_) return FailedPrecondition("BeginRecording: already recording");
    Device();
    kept_ = true;  // from now on, internal buffers a recording may use are never freed
    rec_ = std::make_unique<CudaRecording>();
    rec_status_ = Status::Ok();
    recording_ = true;
    BeginSegment();
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<Recording>> EndRecording() override {
    if (!recording_) return FailedPrecondition("EndRecording without BeginRecording");
    Device();
    EndSegment();
    recording_ = false;
    std::unique_ptr<CudaRecording> rec = std::move(rec_);
    if (!rec_status_.ok()) return rec_status_;
    return std::unique_ptr<Recording>(std::move(rec));
  }

  void Replay(const Recording& recording, const ReplayShape& shape) override {
    NotRecording("Replay");
    Device();
    for (const auto& step : static_cast<const CudaRecording&>(recording).steps) {
      if (step.exec) {
        CUDA_OK(cudaGraphLaunch(step.exec, stream_));
        continue;
      }
      AttentionParams p = step.attention;
      p.num_seqs = shape.num_seqs;
      p.max_seqlen = shape.max_seqlen;
      Attention(p);
    }
  }

 private:
  static constexpr size_t kGemmWorkspace = cuda::GemmPlanner::kWorkspaceBytes;

  void Device() const { CUDA_OK(cudaSetDevice(device_)); }

  // The decode attention's split counters: zeroed when (re)allocated, left zero by every
  // launch (a recording that references an outgrown buffer keeps it, still zero).
  int* DecodeCounters(size_t n) {
    void* p = decode_counters_.Get(n * sizeof(int), kept_);
    if (p != counters_ptr_ || n > counters_zeroed_) {
      if (p != counters_ptr_) counters_zeroed_ = 0;
      CUDA_OK(cudaMemsetAsync(static_cast<int*>(p) + counters_zeroed_, 0,
                              (n - counters_zeroed_) * sizeof(int), stream_));
      counters_ptr_ = p;
      counters_zeroed_ = n;
    }
    return static_cast<int*>(p);
  }

  // Calls that synchronise or copy to the host cannot be part of a recording.
  void NotRecording(const char* what) const {
    if (!recording_) return;
    std::fprintf(stderr, "sluice cuda: %s called while recording a forward\n", what);
    std::abort();
  }

  // Capture segments: relaxed mode, since a recorded call may legitimately allocate (none
  // does after the caller's warm-up run, which the engine always does first).
  void BeginSegment() { CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed)); }
  void EndSegment() {
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &g);
    if (e == cudaSuccess) {
      size_t nodes = 0;
      e = cudaGraphGetNodes(g, nullptr, &nodes);
      if (e == cudaSuccess && nodes > 0) {
        cudaGraphExec_t exec = nullptr;
        e = cudaGraphInstantiate(&exec, g, 0);
        if (e == cudaSuccess) rec_->steps.push_back({exec, {}});
      }
    }
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess && rec_status_.ok()) {
      rec_status_ = Internal(std::string("CUDA graph capture failed: ") + cudaGetErrorString(e));
    }
    cudaGetLastError();  // clear the (non-sticky) error of a failed capture
  }

  using RopeKey = std::tuple<double, int, decltype(RopeScaling{}.key())>;
  static RopeKey KeyOf(const RopeParams& p) {
    return {p.theta, p.rotary_dim > 0 ? p.rotary_dim : p.head_dim, p.scaling.key()};
  }

  // inv_freq as Hugging Face computes it (float32), cached per (theta, rotary_dim, scaling).
  const float* InvFreq(const RopeParams& p) {
    const RopeKey key = KeyOf(p);
    auto it = inv_freq_.find(key);
    if (it != inv_freq_.end()) return it->second.t().ptr<float>();
    NotRecording("RoPE table set-up");
    std::vector<float> inv = RopeInverseFrequencies(p);
    if (inv.empty()) inv.push_back(0.f);
    Buffer b = Allocate(DType::kF32, 1, static_cast<int64_t>(inv.size()));
    CUDA_OK(cudaMemcpyAsync(b.t().data, inv.data(), inv.size() * sizeof(float),
                            cudaMemcpyHostToDevice, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    return inv_freq_.emplace(key, std::move(b)).first->second.t().ptr<float>();
  }

  // (cos, sin) of position * inv_freq[k] for positions [0, capacity), per (theta,
  // rotary_dim): the same float32 angles and double-precision cos/sin as RopeKernel, so the
  // table changes nothing numerically. Grown (to a power of two) when a batch needs more.
  const float2* CosSinTable(const RopeParams& p) {
    if (p.max_position <= 0) return nullptr;
    const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
    const int half = rot / 2;
    if (half == 0) return nullptr;
    auto& entry = cos_sin_[KeyOf(p)];
    if (entry.second < p.max_position) {
      NotRecording("RoPE table growth");
      int cap = 256;
      while (cap < p.max_position) cap *= 2;
      const std::vector<float> inv = RopeInverseFrequencies(p);
      std::vector<float> host(static_cast<size_t>(cap) * half * 2);
      for (int pos = 0; pos < cap; ++pos) {
        for (int i = 0; i < half; ++i) {
          const double ang = static_cast<double>(static_cast<float>(pos) * inv[i]);
          host[(static_cast<size_t>(pos) * half + i) * 2] = static_cast<float>(std::cos(ang));
          host[(static_cast<size_t>(pos) * half + i) * 2 + 1] = static_cast<float>(std::sin(ang));
        }
      }
      CUDA_OK(cudaStreamSynchronize(stream_));  // the old table may still be in use
      if (kept_ && !entry.first.empty()) retired_tables_.push_back(std::move(entry.first));
      entry.first = Allocate(DType::kF32, 1, static_cast<int64_t>(host.size()));
      CUDA_OK(cudaMemcpyAsync(entry.first.t().data, host.data(), host.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream_));
      CUDA_OK(cudaStreamSynchronize(stream_));
      entry.second = cap;
    }
    return static_cast<const float2*>(entry.first.t().data);
  }

  int device_;
  bool tf32_;
  std::string describe_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  Scratch blas_ws_, xconv_ws_, yws_, copy_ws_;
  Scratch sample_rows_, sample_adj_, sample_raw_, sample_out_;  // Sample's device copies
  Scratch sample_mask_;                                         // structured-output token bitmasks
  Scratch sample_allowed_, sample_allowed_vals_;  // sparse allow-lists: ids, saved logits
  // StageSampleInputs: its copy stream (made on first use), the copies in flight and the
  // events ordering them against Sample.
  struct Staged {
    bool valid = false;
    const uint32_t* masks = nullptr;
    const int32_t* allowed = nullptr;
    size_t mask_bytes = 0, ids_bytes = 0;
    uint32_t* masks_dev = nullptr;
    int32_t* allowed_dev = nullptr;
  };
  Staged staged_;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t staged_event_ = nullptr, sample_done_ = nullptr;
  bool sample_done_recorded_ = false;
  Scratch decode_ws_;        // split-decode attention partials
  Scratch decode_counters_;  // their per-(sequence, KV head) counters (DecodeCounters)
  void* counters_ptr_ = nullptr;
  size_t counters_zeroed_ = 0;
  int num_sms_ = 0;
  bool invariant_ = false;  // BackendOptions::batch_invariant
  bool gemv_ = true;        // skinny GEMMs (M <= kGemvMaxRows) on the GEMV kernel
  // Recording state. kept_: a recording exists (or existed), so outgrown internal buffers are
  // kept alive (retired) rather than freed.
  bool recording_ = false, kept_ = false;
  std::unique_ptr<CudaRecording> rec_;
  Status rec_status_;
  std::vector<Buffer> retired_tables_;
  void* gemm_ws_ = nullptr;
  std::unique_ptr<cuda::GemmPlanner> gemm_;
  bool graph_attention_ = true;  // tensor-core attention captured in recordings
  std::map<RopeKey, Buffer> inv_freq_;
  std::map<RopeKey, std::pair<Buffer, int>> cos_sin_;  // table, positions
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options) {
  const int n = CudaDeviceCount();
  if (n == 0) {
    return Status(StatusCode::kUnavailable, "no CUDA device available (cudaGetDeviceCount)");
  }
  if (options.device_index < 0 || options.device_index >= n) {
    return InvalidArgument("CUDA device " + std::to_string(options.device_index) +
                           " does not exist (" + std::to_string(n) + " visible)");
  }
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(
      options.device_index, options.allow_tf32, options.batch_invariant));
}

}  // namespace sluice
