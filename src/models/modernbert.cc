// ModernBERT encoders (ModernBertModel and its sequence/token classification heads, which
// src/pooling resolves): pre-norm LayerNorms (no bias unless norm_bias), no embedding
// positions but RoPE, alternating global and local attention, GeGLU MLP, a final norm.
//
//   h = LN_emb(tok_embeddings[ids])
//   layer l: x = l == 0 ? h : LN_attn(h)              (layer 0 has no attention norm)
//            q, k, v = Wqkv(x); RoPE(q, k) with theta_l
//            h += Wo(attention(q, k, v))               global, or local: |i - j| <= w / 2
//            h += Wo_mlp(act(a) * g) where a, g = Wi(LN_mlp(h))
//   out = LN_final(h)
//
// Layer l is local when config.json's layer_types names it "sliding_attention" (transformers
// 5.x), else when l % global_attn_every_n_layers != 0 (4.x configs; default every 3rd layer
// global); local layers see local_attention / 2 positions on each side, inclusive
// (AttentionParams::window = local_attention / 2 + 1; transformers 5.17 checked against a
// reference, tests/golden/generate_tokenlevel.py). RoPE theta: global layers
// global_rope_theta (default 160000), local layers local_rope_theta (default 10000).
// Biases follow attention_bias, mlp_bias and norm_bias (all false in released checkpoints).
#include <cmath>

#include "models/layers.h"
#include "models/model.h"
#include "models/registry.h"

namespace sluice {

namespace {

struct ModernBertLayer {
  std::unique_ptr<LinearWeight> qkv, attn_out, wi, wo;
  Buffer attn_norm_w, attn_norm_b, mlp_norm_w, mlp_norm_b;  // attn_norm: none in layer 0
  int window = 0;                                           // AttentionParams::window
  double theta = 10000.0;
};

enum Slot {
  kResidual,
  kNormed,
  kQkv,
  kAttn,
  kGateUp,
  kAct,
  kOut,
  kEmbed,
  kResidualRows,
  kNormedRows,
  kAttnRows,
  kGateUpRows,
  kActRows,
  kOutRows
};

constexpr double kDefaultGlobalTheta = 160000.0, kDefaultLocalTheta = 10000.0;

class ModernBertModel final : public SelectableResidualModel {
 public:
  ModernBertModel(ModelConfig config, Backend* backend, DType dtype, bool activation_residual)
      : SelectableResidualModel(std::move(config), backend, dtype, activation_residual) {}

  Status Load(const WeightStore& store, const std::string& prefix) {
    const auto& c = config_;
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_hidden_layers <= 0 ||
        c.intermediate_size <= 0 || c.vocab_size <= 0 || c.max_position_embeddings <= 0) {
      return InvalidArgument(c.dir +
                             "/config.json: hidden_size, num_attention_heads, "
                             "num_hidden_layers, intermediate_size, vocab_size and "
                             "max_position_embeddings must be positive");
    }
    if (c.hidden_size % c.num_attention_heads != 0) {
      return InvalidArgument("hidden_size must be divisible by num_attention_heads");
    }
    if (c.rope_type != "default") {
      return Unsupported("rope scaling \"" + c.rope_type + "\" of " + c.architecture +
                         " is not supported (only default RoPE)");
    }
    const int every = c.global_attn_every_n_layers > 0 ? c.global_attn_every_n_layers : 3;
    const int local = c.local_attention > 0 ? c.local_attention : 128;
    if (!c.layer_types.empty() &&
        c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers)) {
      return InvalidArgument(c.dir + "/config.json: layer_types has " +
                             std::to_string(c.layer_types.size()) + " entries for " +
                             std::to_string(c.num_hidden_layers) + " layers");
    }
    ASSIGN_OR_RETURN(act_, ParseActivation(c.hidden_act));
    eps_ = static_cast<float>(c.norm_eps.value_or(1e-5));
    WeightLoader w(store, backend_, prefix, dtype_);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    ASSIGN_OR_RETURN(embed_, w.Table("embeddings.tok_embeddings.weight", c.vocab_size, H));
    RETURN_IF_ERROR(Norm(w, "embeddings.norm", &emb_norm_w_, &emb_norm_b_));
    RETURN_IF_ERROR(Norm(w, "final_norm", &final_norm_w_, &final_norm_b_));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      ModernBertLayer L;
      if (l > 0) RETURN_IF_ERROR(Norm(w, p + "attn_norm", &L.attn_norm_w, &L.attn_norm_b));
      RETURN_IF_ERROR(Norm(w, p + "mlp_norm", &L.mlp_norm_w, &L.mlp_norm_b));
      ASSIGN_OR_RETURN(L.qkv, w.Linear(p + "attn.Wqkv", 3 * H, H, c.attention_bias));
      ASSIGN_OR_RETURN(L.attn_out, w.Linear(p + "attn.Wo", H, H, c.attention_bias));
      ASSIGN_OR_RETURN(L.wi, w.Linear(p + "mlp.Wi", 2 * I, H, c.mlp_bias));
      ASSIGN_OR_RETURN(L.wo, w.Linear(p + "mlp.Wo", H, I, c.mlp_bias));
      const bool sliding =
          c.layer_types.empty() ? l % every != 0 : c.layer_types[l] == "sliding_attention";
      L.window = sliding ? local / 2 + 1 : 0;
      L.theta = sliding ? c.local_rope_theta.value_or(kDefaultLocalTheta)
                        : c.global_rope_theta.value_or(kDefaultGlobalTheta);
      layers_.push_back(std::move(L));
    }
    return Status::Ok();
  }

  bool SupportsKeyLimits() const override { return true; }

  StatusOr<Tensor> Forward(const DeviceBatch& b, Workspace& ws) override {
    const auto& c = config_;
    const int64_t T = b.num_tokens, H = c.hidden_size, I = c.intermediate_size;
    const int heads = c.num_attention_heads, D = static_cast<int>(H / heads);
    // The residual stream is f32, or with activation_residual_ the backend's activation
    // dtype (bf16/f16 on CUDA next to bf16/f16 weights, as transformers keeps it; f32 on
    // CPU); per-token intermediates (GEMM inputs and outputs, attention) are in the
    // backend's inner activation dtype (bf16/f16 on CUDA next to bf16/f16 weights; bf16 on
    // CPU next to bf16 weights; f32 otherwise).
    const DType A = backend_->InnerActivationDType(dtype_);
    const DType R = ResidualDType();
    Tensor res = ws.Get(kResidual, R, T, H);
    Tensor x = ws.Get(kNormed, A, T, H);
    Tensor qkv = ws.Get(kQkv, A, T, 3 * H);
    Tensor attn = ws.Get(kAttn, A, T, H);
    Tensor gu = ws.Get(kGateUp, A, T, 2 * I);
    Tensor act = ws.Get(kAct, A, T, I);

    // Layer 0 reads the normalised embeddings without a norm of its own: the same LN
    // into the residual stream (f32) and into x (the activation dtype).
    Tensor emb = ws.Get(kEmbed, DType::kF32, T, H);
    backend_->EmbeddingGather(embed_.t(), b.ids.ptr<int32_t>(), T, emb, false);
    backend_->LayerNorm(emb, nullptr, emb_norm_w_.t(), Bias(emb_norm_b_), eps_, res);
    backend_->LayerNorm(emb, nullptr, emb_norm_w_.t(), Bias(emb_norm_b_), eps_, x);

    AttentionParams ap;
    ap.cu_seqlens = b.cu_seqlens.ptr<int32_t>();
    ap.num_seqs = b.num_seqs;
    ap.max_seqlen = b.max_seqlen;
    ap.num_heads = ap.num_kv_heads = heads;
    ap.head_dim = D;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
    ap.products = AttentionProducts(dtype_);
    ap.causal = false;
    ap.key_lens = b.key_lens.ptr<int32_t>();  // ColBERT expansion tokens, or null
    ap.seq_capacity = b.seq_capacity;
    ap.fixed_shape = b.fixed_shape;
    RopeParams rp;
    rp.positions = b.positions.ptr<int32_t>();
    rp.num_heads = 2 * heads;
    rp.head_dim = D;
    rp.rotary_dim = D;
    rp.style = RopeStyle::kNeox;
    rp.max_position = b.max_context;

    const bool prune = b.output_rows.data != nullptr;
    const int64_t S = b.num_output_rows;
    const int32_t* rows = b.output_rows.ptr<int32_t>();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const ModernBertLayer& L = layers_[l];
      if (l > 0) backend_->LayerNorm(res, nullptr, L.attn_norm_w.t(), Bias(L.attn_norm_b), eps_, x);
      backend_->Linear({L.qkv.get(), x, qkv});
      rp.theta = L.theta;
      rp.x = qkv.ColSlice(0, 2 * H);  // q and k, adjacent: one rotation of 2 x heads heads
      backend_->Rope(rp);
      ap.q = qkv.ColSlice(0, H);
      ap.k = qkv.ColSlice(H, H);
      ap.v = qkv.ColSlice(2 * H, H);
      ap.out = attn;
      ap.window = L.window;
      backend_->Attention(ap);
      if (prune && l + 1 == layers_.size()) {
        // Last layer: only the output rows need the o-proj, MLP and final norm.
        Tensor rs = ws.Get(kResidualRows, R, S, H);
        Tensor as = ws.Get(kAttnRows, A, S, H);
        backend_->GatherRows(attn, rows, S, as);
        backend_->GatherRows(res, rows, S, rs);
        PostAttention(L, as, rs, ws.Get(kNormedRows, A, S, H), ws.Get(kGateUpRows, A, S, 2 * I),
                      ws.Get(kActRows, A, S, I));
        Tensor out = ws.Get(kOutRows, DType::kF32, S, H);
        backend_->LayerNorm(rs, nullptr, final_norm_w_.t(), Bias(final_norm_b_), eps_, out);
        return out;
      }
      PostAttention(L, attn, res, x, gu, act);
    }
    Tensor out = ws.Get(kOut, DType::kF32, T, H);
    backend_->LayerNorm(res, nullptr, final_norm_w_.t(), Bias(final_norm_b_), eps_, out);
    if (prune) {
      Tensor outs = ws.Get(kOutRows, DType::kF32, S, H);
      backend_->GatherRows(out, rows, S, outs);
      return outs;
    }
    return out;
  }

 private:
  // A LayerNorm's weight, and its bias when config.json has norm_bias.
  Status Norm(WeightLoader& w, const std::string& name, Buffer* weight, Buffer* bias) {
    const int64_t H = config_.hidden_size;
    ASSIGN_OR_RETURN(*weight, w.Vector(name + ".weight", H));
    if (config_.norm_bias) {
      ASSIGN_OR_RETURN(*bias, w.Vector(name + ".bias", H));
    }
    return Status::Ok();
  }
  static const Tensor* Bias(const Buffer& b) { return b.empty() ? nullptr : &b.t(); }

  // res += attn·Wo; res += Wo_mlp(act(a) * g), (a, g) = Wi(LN_mlp(res)); over attn's rows.
  void PostAttention(const ModernBertLayer& L, Tensor attn, Tensor res, Tensor x, Tensor gu,
                     Tensor act) {
    backend_->Linear({L.attn_out.get(), attn, res, Activation::kNone, &res});
    backend_->LayerNorm(res, nullptr, L.mlp_norm_w.t(), Bias(L.mlp_norm_b), eps_, x);
    backend_->Linear({L.wi.get(), x, gu});
    backend_->GatedActivate(gu, act_, act);
    backend_->Linear({L.wo.get(), act, res, Activation::kNone, &res});
  }

  Activation act_ = Activation::kGeluErf;
  float eps_ = 1e-5f;
  Buffer embed_, emb_norm_w_, emb_norm_b_, final_norm_w_, final_norm_b_;
  std::vector<ModernBertLayer> layers_;
};

StatusOr<std::unique_ptr<Model>> CreateModernBert(const ModelConfig& config,
                                                  const WeightStore& weights, Backend* backend,
                                                  const ModelLoadOptions& options) {
  auto m = std::make_unique<ModernBertModel>(config, backend, options.dtype,
                                             options.activation_residual);
  RETURN_IF_ERROR(m->Load(weights, options.prefix));
  return std::unique_ptr<Model>(std::move(m));
}

ArchitectureInfo ModernBert(std::string name, HeadKind head, Task task) {
  ArchitectureInfo a;
  a.name = std::move(name);
  a.family = "modernbert";
  a.prefixes = {"model.", ""};
  a.probe = "embeddings.tok_embeddings.weight";
  a.pooling = DefaultPooling::kFirst;
  a.head = head;
  a.default_task = task;
  a.factory = CreateModernBert;
  return a;
}

SLUICE_REGISTER_ARCHITECTURES({
    ModernBert("ModernBertModel", HeadKind::kNone, Task::kEmbed),
    ModernBert("ModernBertForSequenceClassification", HeadKind::kModernBertClassifier,
               Task::kClassify),
    ModernBert("ModernBertForTokenClassification", HeadKind::kModernBertTokenClassifier,
               Task::kTokenClassify),
});

}  // namespace

}  // namespace sluice
