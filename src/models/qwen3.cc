// Qwen3 decoder stack (pre-norm, RMSNorm, GQA with per-head QK-norm, neox RoPE,
// SwiGLU MLP), run causally over packed sequences. Used by Qwen3Model (embeddings),
// Qwen3ForSequenceClassification and Qwen3ForCausalLM yes/no rerankers; the heads live
// in src/pooling.
#include <cmath>

#include "models/layers.h"
#include "models/model.h"
#include "models/registry.h"

namespace sluice {

namespace {

struct Qwen3Layer {
  std::unique_ptr<LinearWeight> qkv, o, gate_up, down;
  Buffer in_norm, post_norm, q_norm, k_norm;
};

enum Slot {
  kResidual,
  kNormed,
  kQkv,
  kAttn,
  kGateUp,
  kAct,
  kOut,
  kResidualRows,
  kNormedRows,
  kAttnRows,
  kGateUpRows,
  kActRows,
  kOutRows
};

class Qwen3Model final : public Model {
 public:
  Qwen3Model(ModelConfig config, Backend* backend, DType dtype, bool activation_residual)
      : Model(std::move(config), backend, dtype), activation_residual_(activation_residual) {}

  Status Load(const WeightStore& store, const std::string& prefix) {
    const auto& c = config_;
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_hidden_layers <= 0 ||
        c.intermediate_size <= 0 || c.vocab_size <= 0 || c.head_dim <= 0 ||
        c.num_key_value_heads <= 0) {
      return InvalidArgument(c.dir +
                             "/config.json: hidden_size, num_attention_heads, "
                             "num_key_value_heads, head_dim, num_hidden_layers, "
                             "intermediate_size and vocab_size must be positive");
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
      return InvalidArgument("num_attention_heads must be a multiple of num_key_value_heads");
    }
    if (c.use_sliding_window) {
      return Unsupported("Qwen3 with use_sliding_window=true is not supported yet");
    }
    if (c.rope_type != "default") {
      return Unsupported("rope_type \"" + c.rope_type + "\" is not supported (only default)");
    }
    if (c.hidden_act != "silu") {
      return Unsupported("Qwen3 hidden_act \"" + c.hidden_act + "\" (only silu)");
    }
    WeightLoader w(store, backend_, prefix, dtype_);
    const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
    const int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
    ASSIGN_OR_RETURN(embed_, w.Table("embed_tokens.weight", c.vocab_size, H));
    ASSIGN_OR_RETURN(final_norm_, w.Vector("norm.weight", H));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      Qwen3Layer L;
      ASSIGN_OR_RETURN(L.qkv, w.FusedLinear({p + "self_attn.q_proj", p + "self_attn.k_proj",
                                             p + "self_attn.v_proj"},
                                            {q_out, kv_out, kv_out}, H, c.attention_bias));
      ASSIGN_OR_RETURN(L.o, w.Linear(p + "self_attn.o_proj", H, q_out, c.attention_bias));
      ASSIGN_OR_RETURN(L.gate_up,
                       w.FusedLinear({p + "mlp.gate_proj", p + "mlp.up_proj"}, {I, I}, H, false));
      ASSIGN_OR_RETURN(L.down, w.Linear(p + "mlp.down_proj", H, I, false));
      ASSIGN_OR_RETURN(L.in_norm, w.Vector(p + "input_layernorm.weight", H));
      ASSIGN_OR_RETURN(L.post_norm, w.Vector(p + "post_attention_layernorm.weight", H));
      ASSIGN_OR_RETURN(L.q_norm, w.Vector(p + "self_attn.q_norm.weight", D));
      ASSIGN_OR_RETURN(L.k_norm, w.Vector(p + "self_attn.k_norm.weight", D));
      layers_.push_back(std::move(L));
    }
    return Status::Ok();
  }

  int max_sequence_length() const override { return config_.max_position_embeddings; }
  bool SupportsPrefixReuse() const override { return true; }

  StatusOr<Tensor> Forward(const DeviceBatch& b, Workspace& ws) override {
    const auto& c = config_;
    const int64_t T = b.num_tokens, H = c.hidden_size, I = c.intermediate_size;
    const int D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // The residual stream is f32 (or the activation dtype with activation_residual_);
    // per-token intermediates (GEMM inputs and outputs, attention) are in the backend's
    // activation dtype (f32 on CPU, bf16/f16 on CUDA).
    const DType A = backend_->ActivationDType(dtype_);
    const DType R = activation_residual_ ? A : DType::kF32;
    Tensor res = ws.Get(kResidual, R, T, H);
    Tensor x = ws.Get(kNormed, A, T, H);
    Tensor qkv = ws.Get(kQkv, A, T, static_cast<int64_t>(Hq + 2 * Hkv) * D);
    Tensor attn = ws.Get(kAttn, A, T, static_cast<int64_t>(Hq) * D);
    Tensor gu = ws.Get(kGateUp, A, T, 2 * I);
    Tensor act = ws.Get(kAct, A, T, I);

    backend_->EmbeddingGather(embed_.t(), b.ids.ptr<int32_t>(), T, res, false);

    AttentionParams ap;
    ap.cu_seqlens = b.cu_seqlens.ptr<int32_t>();
    ap.num_seqs = b.num_seqs;
    ap.max_seqlen = b.max_seqlen;
    ap.num_heads = Hq;
    ap.num_kv_heads = Hkv;
    ap.head_dim = D;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
    ap.causal = true;
    ap.prefix_of = b.prefix_of.ptr<int32_t>();
    RopeParams rp;
    rp.positions = b.positions.ptr<int32_t>();
    rp.head_dim = D;
    rp.rotary_dim = D;
    rp.theta = c.rope_theta;
    rp.style = RopeStyle::kNeox;
    rp.max_position = b.max_context;

    const bool prune = b.output_rows.data != nullptr;
    const int64_t S = b.num_output_rows;
    const int32_t* rows = b.output_rows.ptr<int32_t>();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Qwen3Layer& L = layers_[l];
      backend_->RmsNorm(res, nullptr, L.in_norm.t(), eps, x);
      backend_->Linear({L.qkv.get(), x, qkv});
      Tensor q = qkv.ColSlice(0, static_cast<int64_t>(Hq) * D);
      Tensor k = qkv.ColSlice(static_cast<int64_t>(Hq) * D, static_cast<int64_t>(Hkv) * D);
      Tensor v = qkv.ColSlice(static_cast<int64_t>(Hq + Hkv) * D, static_cast<int64_t>(Hkv) * D);
      rp.x = q;
      rp.num_heads = Hq;
      backend_->QkNormRope(rp, L.q_norm.t(), eps);
      rp.x = k;
      rp.num_heads = Hkv;
      backend_->QkNormRope(rp, L.k_norm.t(), eps);
      ap.q = q;
      ap.k = k;
      ap.v = v;
      ap.out = attn;
      backend_->Attention(ap);
      if (prune && l + 1 == layers_.size()) {
        // Last layer: only the output rows need the o-proj, MLP and final norm.
        Tensor rs = ws.Get(kResidualRows, R, S, H);
        Tensor as = ws.Get(kAttnRows, A, S, attn.cols);
        backend_->GatherRows(attn, rows, S, as);
        backend_->GatherRows(res, rows, S, rs);
        PostAttention(L, as, rs, ws.Get(kNormedRows, A, S, H), ws.Get(kGateUpRows, A, S, 2 * I),
                      ws.Get(kActRows, A, S, I), eps);
        Tensor out = ws.Get(kOutRows, DType::kF32, S, H);
        backend_->RmsNorm(rs, nullptr, final_norm_.t(), eps, out);
        return out;
      }
      PostAttention(L, attn, res, x, gu, act, eps);
    }
    Tensor out = ws.Get(kOut, DType::kF32, T, H);
    backend_->RmsNorm(res, nullptr, final_norm_.t(), eps, out);
    if (prune) {
      Tensor outs = ws.Get(kOutRows, DType::kF32, S, H);
      backend_->GatherRows(out, rows, S, outs);
      return outs;
    }
    return out;
  }

  // res += attn·Wo; x = RMSNorm(res); res += MLP(x), over the rows of attn/res.
  void PostAttention(const Qwen3Layer& L, Tensor attn, Tensor res, Tensor x, Tensor gu, Tensor act,
                     float eps) {
    backend_->Linear({L.o.get(), attn, res, Activation::kNone, &res});
    backend_->RmsNorm(res, nullptr, L.post_norm.t(), eps, x);
    backend_->Linear({L.gate_up.get(), x, gu});
    backend_->GatedActivate(gu, Activation::kSilu, act);
    backend_->Linear({L.down.get(), act, res, Activation::kNone, &res});
  }

 private:
  bool activation_residual_;
  Buffer embed_, final_norm_;
  std::vector<Qwen3Layer> layers_;
};

StatusOr<std::unique_ptr<Model>> CreateQwen3Model(const ModelConfig& config,
                                                  const WeightStore& weights, Backend* backend,
                                                  const ModelLoadOptions& options) {
  auto m =
      std::make_unique<Qwen3Model>(config, backend, options.dtype, options.activation_residual);
  RETURN_IF_ERROR(m->Load(weights, options.prefix));
  return std::unique_ptr<Model>(std::move(m));
}

ArchitectureInfo Decoder(std::string name, HeadKind head, Task task) {
  ArchitectureInfo a;
  a.name = std::move(name);
  a.family = "qwen3";
  a.prefixes = {"model.", ""};
  a.probe = "embed_tokens.weight";
  a.causal = true;
  a.pooling = DefaultPooling::kLast;
  a.head = head;
  a.default_task = task;
  a.factory = CreateQwen3Model;
  return a;
}

SLUICE_REGISTER_ARCHITECTURES({
    Decoder("Qwen3Model", HeadKind::kNone, Task::kEmbed),
    Decoder("Qwen3ForSequenceClassification", HeadKind::kScoreLast, Task::kClassify),
    Decoder("Qwen3ForCausalLM", HeadKind::kLanguageModel, Task::kScore),
});

}  // namespace

}  // namespace sluice
