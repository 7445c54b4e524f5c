#include "engine/pooler.h"

#include <algorithm>

namespace sluice {

namespace {
// Workspace slots of the pooler (models use small numbers, the runner's inputs 1000).
enum PoolerSlots { kSlotPooled = 2000, kSlotHeadDense = 2001, kSlotTokenHead = 2002 };
}  // namespace

StatusOr<std::unique_ptr<Pooler>> Pooler::Create(ModelRunner* runner, HeadSpec head) {
  auto p = std::unique_ptr<Pooler>(new Pooler(runner, std::move(head)));
  const HeadSpec& h = p->head_;
  Backend& backend = runner->backend();
  if (p->token_level()) {
    // Token-level heads run over every token row: in the activation dtype (bf16/f16 on CUDA
    // next to half weights, as transformers runs them in a half model; f32 otherwise), on
    // tensor cores rather than as f32 GEMMs. Their outputs and norms stay f32.
    const DType head_dtype = backend.ActivationDType(runner->compute_dtype());
    for (size_t i = 0; i < h.layers.size(); ++i) {
      const HostLinear& l = h.layers[i];
      TokenLayer t;
      if (!DeviceActivation(l.act, &t.act)) {
        if (i + 1 < h.layers.size() || !l.norm_weight.empty()) {
          return Unsupported("token-level head layer " + l.name + ": activation " + l.act +
                             " before another layer is not supported");
        }
        t.act = Activation::kNone;  // applied on the host (HeadRunner::ApplyTokens)
      }
      HostTensor hw{l.weight.data(), DType::kF32, {l.out, l.in}, "head " + l.name};
      HostTensor hb{l.bias.data(), DType::kF32, {l.out}, "head " + l.name + " bias"};
      ASSIGN_OR_RETURN(t.linear,
                       backend.PrepareLinear(hw, l.bias.empty() ? nullptr : &hb, head_dtype));
      if (!l.norm_weight.empty()) {
        HostTensor nw{l.norm_weight.data(), DType::kF32, {l.out}, l.name + " norm"};
        ASSIGN_OR_RETURN(t.norm_weight, backend.Upload(nw, DType::kF32));
        if (!l.norm_bias.empty()) {
          HostTensor nb{l.norm_bias.data(), DType::kF32, {l.out}, l.name + " norm bias"};
          ASSIGN_OR_RETURN(t.norm_bias, backend.Upload(nb, DType::kF32));
        }
        t.norm_eps = l.norm_eps;
      }
      p->token_layers_.push_back(std::move(t));
    }
  }
  if (!h.layers.empty() && !p->token_level()) {
    // On the host this product was the slowest part of a BERT cross-encoder on CUDA.
    const HostLinear& l = h.layers[0];
    HostTensor hw{l.weight.data(), DType::kF32, {l.out, l.in}, "head " + l.name};
    HostTensor hb{l.bias.data(), DType::kF32, {l.out}, "head " + l.name + " bias"};
    ASSIGN_OR_RETURN(p->head_dense_,
                     backend.PrepareLinear(hw, l.bias.empty() ? nullptr : &hb, DType::kF32));
  }
  return p;
}

// CLS/LAST pooling needs one row per sequence: an eager forward then skips the last
// layer's per-token work for the others and returns exactly those rows.
OutputRows Pooler::rows() const {
  return head_.pooling == PoolingKind::kCls    ? OutputRows::kFirst
         : head_.pooling == PoolingKind::kLast ? OutputRows::kLast
                                               : OutputRows::kNone;
}

Status Pooler::Enqueue(const ForwardBatch& batch, const RunnerForward& f, int index) {
  Slot& slot = slots_[index];
  Backend& backend = runner_->backend();
  Workspace& ws = runner_->workspace();
  const int S = batch.num_seqs();
  const int H = runner_->model().hidden_size();
  const OutputRows out_rows = rows();
  // What comes back to the host: every token row (ALL/STEP), or one row per sequence after
  // pooling and the head's first dense layer.
  Tensor result;
  slot.first_layer = 0;
  slot.cu_seqlens.clear();
  slot.token_ids.clear();
  if (token_level()) {
    result = f.hidden;
    // The token-level head over every row, on the device (alternating two workspace slots).
    for (size_t i = 0; i < token_layers_.size(); ++i) {
      const TokenLayer& t = token_layers_[i];
      Tensor y = ws.Get(kSlotTokenHead + static_cast<int>(i % 2), DType::kF32, result.rows,
                        t.linear->out_features);
      backend.Linear({t.linear.get(), result, y, t.act});
      if (!t.norm_weight.empty()) {
        backend.LayerNorm(y, nullptr, t.norm_weight.t(),
                          t.norm_bias.empty() ? nullptr : &t.norm_bias.t(), t.norm_eps, y);
      }
      result = y;
    }
    slot.cu_seqlens = batch.cu_seqlens;
    if (head_.pooling == PoolingKind::kStep) slot.token_ids = batch.token_ids;
  } else {
    Tensor pooled;
    if (out_rows != OutputRows::kNone && !f.replayed) {
      pooled = f.hidden;  // the forward returned the output rows
    } else if (out_rows != OutputRows::kNone) {
      pooled = ws.Get(kSlotPooled, f.hidden.dtype, S, H);
      backend.GatherRows(f.hidden, f.device.output_rows.ptr<int32_t>(), S, pooled);
    } else {
      pooled = ws.Get(kSlotPooled, DType::kF32, S, H);
      PoolParams pp;
      pp.hidden = f.hidden;
      pp.out = pooled;
      pp.cu_seqlens = f.device.cu_seqlens.ptr<int32_t>();
      pp.num_seqs = S;
      pp.mode = head_.pooling == PoolingKind::kMax    ? PoolMode::kMax
                : head_.pooling == PoolingKind::kMean ? PoolMode::kMean
                : head_.pooling == PoolingKind::kCls  ? PoolMode::kCls
                                                      : PoolMode::kLast;
      backend.Pool(pp);
    }
    result = pooled;
    if (head_dense_) {  // the head's first matrix product on the device
      result = ws.Get(kSlotHeadDense, DType::kF32, S, head_dense_->out_features);
      backend.Linear({head_dense_.get(), pooled, result});
      slot.first_layer = 1;
    }
  }
  slot.rows = static_cast<int>(result.rows);
  slot.width = static_cast<int>(result.cols);
  const size_t out_bytes = static_cast<size_t>(result.numel()) * sizeof(float);
  if (slot.results.size() < out_bytes)
    slot.results = backend.AllocateHost(out_bytes + out_bytes / 4);
  backend.CopyToHostF32Async(result, slot.results.as<float>());
  return Status::Ok();
}

void Pooler::Complete(int index, const std::vector<int>& packed_index, PooledOutput* outputs) {
  Slot& slot = slots_[index];
  const float* r = slot.results.as<float>();
  const int H = slot.width;
  if (!token_level()) {
    if (packed_index.empty()) {
      HeadRunner(head_, slot.first_layer).Apply(r, slot.rows, H, outputs);
      return;
    }
    // Shared-prefix groups: the rows of the input sequences, in input order.
    const size_t n = packed_index.size();
    slot.gathered.resize(n * H);
    for (size_t s = 0; s < n; ++s) {
      std::copy_n(r + static_cast<size_t>(packed_index[s]) * H, H, slot.gathered.data() + s * H);
    }
    HeadRunner(head_, slot.first_layer)
        .Apply(slot.gathered.data(), static_cast<int>(n), H, outputs);
    return;
  }
  HeadRunner runner(head_);
  const std::vector<int32_t>& cu = slot.cu_seqlens;
  std::vector<float> rows;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int32_t b = cu[s], e = cu[s + 1];
    PooledOutput& out = outputs[s];
    out.token_indices.clear();
    if (head_.pooling == PoolingKind::kAll) {
      runner.ApplyTokens(r + static_cast<size_t>(b) * H, e - b, H, &out);
      continue;
    }
    rows.clear();
    for (int32_t i = b; i < e; ++i) {
      if (slot.token_ids[i] == head_.step_token_id) {
        rows.insert(rows.end(), r + static_cast<size_t>(i) * H, r + static_cast<size_t>(i + 1) * H);
        out.token_indices.push_back(i - b);
      }
    }
    runner.ApplyTokens(rows.data(), static_cast<int>(out.token_indices.size()), H, &out);
  }
}

}  // namespace sluice
