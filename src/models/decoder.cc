// LLaMA-style pre-norm decoders: RMSNorm, GQA attention with RoPE, SwiGLU MLP, run
// causally over packed sequences, with or without a paged KV cache. One implementation with
// the variants of each family:
//   Qwen3:   per-head QK-norm (RMSNorm) before RoPE; optional biases (attention_bias)
//   Qwen2:   q/k/v biases, no o-proj bias
//   Llama:   optional biases (attention_bias: q/k/v/o; mlp_bias), rope scaling llama3/linear
//   Mistral: sliding-window attention (sliding_window)
// Sliding windows follow config.json's layer_types (transformers 5.x), else each family's
// rule (Mistral: every layer when sliding_window is set; Qwen2/3: layers from
// max_window_layers on when use_sliding_window). Heads (pooling, classification, yes/no
// rerankers) live in src/pooling; the full-vocabulary lm_head (generation) here (Logits).
#include <cmath>

#include "models/layers.h"
#include "models/model.h"
#include "models/registry.h"

namespace sluice {

namespace {

enum class Family { kQwen3, kQwen2, kLlama, kMistral };

struct DecoderLayer {
  std::unique_ptr<LinearWeight> qkv, o, gate_up, down;
  Buffer in_norm, post_norm, q_norm, k_norm;  // q_norm/k_norm: Qwen3 only
  int window = 0;                             // sliding window, 0 = full attention
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

class DecoderModel final : public SelectableResidualModel {
 public:
  DecoderModel(Family family, ModelConfig config, Backend* backend, DType dtype,
               bool activation_residual)
      : SelectableResidualModel(std::move(config), backend, dtype, activation_residual),
        family_(family) {}

  Status Load(const WeightStore& store, const std::string& prefix, bool lm_head) {
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
    RETURN_IF_ERROR(ResolveRope());
    if (c.hidden_act != "silu") {
      return Unsupported(c.architecture + " hidden_act \"" + c.hidden_act + "\" (only silu)");
    }
    if (!c.layer_types.empty() &&
        c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers)) {
      return InvalidArgument(c.dir + "/config.json: layer_types has " +
                             std::to_string(c.layer_types.size()) + " entries for " +
                             std::to_string(c.num_hidden_layers) + " layers");
    }
    WeightLoader w(store, backend_, prefix, dtype_);
    const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
    const int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
    ASSIGN_OR_RETURN(embed_, w.Table("embed_tokens.weight", c.vocab_size, H));
    ASSIGN_OR_RETURN(final_norm_, w.Vector("norm.weight", H));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      DecoderLayer L;
      // Qwen2 always has q/k/v biases and none on o_proj; the others follow attention_bias.
      const bool qkv_bias = family_ == Family::kQwen2 || c.attention_bias;
      const bool o_bias = family_ != Family::kQwen2 && c.attention_bias;
      const bool mlp_bias = family_ == Family::kLlama && c.mlp_bias;
      ASSIGN_OR_RETURN(L.qkv, w.FusedLinear({p + "self_attn.q_proj", p + "self_attn.k_proj",
                                             p + "self_attn.v_proj"},
                                            {q_out, kv_out, kv_out}, H, qkv_bias));
      ASSIGN_OR_RETURN(L.o, w.Linear(p + "self_attn.o_proj", H, q_out, o_bias));
      ASSIGN_OR_RETURN(
          L.gate_up, w.FusedLinear({p + "mlp.gate_proj", p + "mlp.up_proj"}, {I, I}, H, mlp_bias));
      ASSIGN_OR_RETURN(L.down, w.Linear(p + "mlp.down_proj", H, I, mlp_bias));
      ASSIGN_OR_RETURN(L.in_norm, w.Vector(p + "input_layernorm.weight", H));
      ASSIGN_OR_RETURN(L.post_norm, w.Vector(p + "post_attention_layernorm.weight", H));
      if (family_ == Family::kQwen3) {
        ASSIGN_OR_RETURN(L.q_norm, w.Vector(p + "self_attn.q_norm.weight", D));
        ASSIGN_OR_RETURN(L.k_norm, w.Vector(p + "self_attn.k_norm.weight", D));
      }
      L.window = SlidingWindow(l);
      layers_.push_back(std::move(L));
    }
    if (lm_head) {
      // lm_head.weight lives at the top level of the checkpoint; tied models reuse the
      // embedding table.
      const std::string name =
          c.tie_word_embeddings ? prefix + "embed_tokens.weight" : "lm_head.weight";
      // The LM head (yes/no rows of a reranker, logits) stays f32 under int8.
      WeightLoader top(store, backend_, "", NonLinearDType(dtype_));
      ASSIGN_OR_RETURN(lm_head_,
                       top.Linear(name.substr(0, name.size() - 7), c.vocab_size, H, false));
    }
    return Status::Ok();
  }

  // The sliding window of layer l (0 = full attention), in AttentionParams' convention
  // (query i sees keys j with i - window < j <= i, as transformers' sliding mask).
  int SlidingWindow(int l) const {
    const ModelConfig& c = config_;
    if (c.sliding_window <= 0) return 0;
    if (!c.layer_types.empty()) {
      return c.layer_types[l] == "sliding_attention" ? c.sliding_window : 0;
    }
    if (family_ == Family::kMistral) return c.sliding_window;
    if (c.use_sliding_window && l >= c.max_window_layers) return c.sliding_window;
    return 0;
  }

  Status ResolveRope() {
    const ModelConfig& c = config_;
    rope_scaling_.factor = c.rope_factor;
    rope_scaling_.low_freq_factor = c.rope_low_freq_factor;
    rope_scaling_.high_freq_factor = c.rope_high_freq_factor;
    rope_scaling_.original_max_position = c.rope_original_max_position;
    if (c.rope_type == "default") {
      rope_scaling_.kind = RopeScaling::Kind::kNone;
    } else if (c.rope_type == "linear") {
      rope_scaling_.kind = RopeScaling::Kind::kLinear;
    } else if (c.rope_type == "llama3") {
      rope_scaling_.kind = RopeScaling::Kind::kLlama3;
      if (c.rope_original_max_position <= 0 || c.rope_high_freq_factor <= c.rope_low_freq_factor) {
        return InvalidArgument(c.dir +
                               "/config.json: llama3 rope scaling needs "
                               "original_max_position_embeddings and high_freq_factor > "
                               "low_freq_factor");
      }
    } else {
      return Unsupported("rope scaling \"" + c.rope_type + "\" of " + c.architecture +
                         " is not supported (supported: default, linear, llama3)");
    }
    if ((rope_scaling_.kind != RopeScaling::Kind::kNone) && c.rope_factor <= 0) {
      return InvalidArgument(c.dir + "/config.json: rope scaling factor must be positive");
    }
    return Status::Ok();
  }

  int max_sequence_length() const override { return config_.max_position_embeddings; }
  bool SupportsPrefixReuse() const override { return true; }
  bool SupportsKvCache() const override { return true; }
  int64_t kv_dim() const override {
    return static_cast<int64_t>(config_.num_key_value_heads) * config_.head_dim;
  }
  Status Logits(const Tensor& hidden, Tensor out) override {
    if (!lm_head_) return Model::Logits(hidden, out);
    backend_->Linear({lm_head_.get(), hidden, out});
    return Status::Ok();
  }

  StatusOr<Tensor> Forward(const DeviceBatch& b, Workspace& ws) override {
    const auto& c = config_;
    const int64_t T = b.num_tokens, H = c.hidden_size, I = c.intermediate_size;
    const int D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // The residual stream is f32 (or the activation dtype with activation_residual_);
    // per-token intermediates (GEMM inputs and outputs, attention) are in the backend's
    // activation dtype (f32 on CPU, bf16/f16 on CUDA).
    const DType A = backend_->ActivationDType(dtype_);
    const DType R = ResidualDType();
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
    ap.products = AttentionProducts(dtype_);
    ap.causal = true;
    ap.prefix_of = b.prefix_of.ptr<int32_t>();
    ap.fixed_shape = b.fixed_shape;
    ap.seq_capacity = b.seq_capacity;
    RopeParams rp;
    rp.positions = b.positions.ptr<int32_t>();
    rp.head_dim = D;
    rp.rotary_dim = D;
    rp.theta = c.rope_theta;
    rp.style = RopeStyle::kNeox;
    rp.max_position = b.max_context;
    rp.scaling = rope_scaling_;
    const bool paged = b.kv_cache != nullptr;
    if (paged) {
      ap.prefix_of = nullptr;
      ap.kv_block_table = b.kv_block_table.ptr<int32_t>();
      ap.kv_start = b.kv_start.ptr<int32_t>();
      ap.kv_blocks_per_seq = b.kv_blocks_per_seq;
      ap.kv_block_size = b.kv_block_size;
      ap.max_context = b.max_context;
    }

    const bool prune = b.output_rows.data != nullptr;
    const int64_t S = b.num_output_rows;
    const int32_t* rows = b.output_rows.ptr<int32_t>();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const DecoderLayer& L = layers_[l];
      LinearBlockParams qkv_block;
      qkv_block.weight = L.qkv.get();
      qkv_block.x = res;
      qkv_block.out = qkv;
      qkv_block.norm_weight = &L.in_norm.t();
      qkv_block.eps = eps;
      qkv_block.normed = x;
      backend_->LinearBlock(qkv_block);
      Tensor q = qkv.ColSlice(0, static_cast<int64_t>(Hq) * D);
      Tensor k = qkv.ColSlice(static_cast<int64_t>(Hq) * D, static_cast<int64_t>(Hkv) * D);
      Tensor v = qkv.ColSlice(static_cast<int64_t>(Hq + Hkv) * D, static_cast<int64_t>(Hkv) * D);
      ap.q = q;
      ap.k = k;
      ap.v = v;
      ap.out = attn;
      ap.window = L.window;
      rp.x = q;
      rp.num_heads = Hq;
      if (paged) {
        // RoPE (+ QK-norm) of q and k and the KV-cache write, fused where the backend can.
        const Tensor& kc = (*b.kv_cache)[2 * l];
        const Tensor& vc = (*b.kv_cache)[2 * l + 1];
        AttentionInputParams in;
        in.q_rope = rp;
        in.k = k;
        const bool qk_norm = family_ == Family::kQwen3;
        in.q_norm = qk_norm ? &L.q_norm.t() : nullptr;
        in.k_norm = qk_norm ? &L.k_norm.t() : nullptr;
        in.eps = eps;
        in.num_kv_heads = Hkv;
        in.kv = {k, v, kc, vc, b.kv_slots.ptr<int32_t>()};
        backend_->AttentionInputs(in);
        ap.k = kc;
        ap.v = vc;
      } else if (family_ == Family::kQwen3) {  // q and k have norms of their own
        backend_->QkNormRope(rp, L.q_norm.t(), eps);
        rp.x = k;
        rp.num_heads = Hkv;
        backend_->QkNormRope(rp, L.k_norm.t(), eps);
      } else {  // q and k, adjacent in the fused projection: one rotation of Hq + Hkv heads
        rp.x = qkv.ColSlice(0, static_cast<int64_t>(Hq + Hkv) * D);
        rp.num_heads = Hq + Hkv;
        backend_->Rope(rp);
      }
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
  void PostAttention(const DecoderLayer& L, Tensor attn, Tensor res, Tensor x, Tensor gu,
                     Tensor act, float eps) {
    backend_->Linear({L.o.get(), attn, res, Activation::kNone, &res});
    LinearBlockParams mlp;
    mlp.weight = L.gate_up.get();
    mlp.x = res;
    mlp.out = act;
    mlp.norm_weight = &L.post_norm.t();
    mlp.eps = eps;
    mlp.normed = x;
    mlp.gate = Activation::kSilu;
    mlp.gate_up = gu;
    backend_->LinearBlock(mlp);
    backend_->Linear({L.down.get(), act, res, Activation::kNone, &res});
  }

 private:
  Family family_;
  RopeScaling rope_scaling_;
  Buffer embed_, final_norm_;
  std::vector<DecoderLayer> layers_;
  std::unique_ptr<LinearWeight> lm_head_;
};

template <Family kFamily>
StatusOr<std::unique_ptr<Model>> CreateDecoder(const ModelConfig& config,
                                               const WeightStore& weights, Backend* backend,
                                               const ModelLoadOptions& options) {
  auto m = std::make_unique<DecoderModel>(kFamily, config, backend, options.dtype,
                                          options.activation_residual);
  RETURN_IF_ERROR(m->Load(weights, options.prefix, options.lm_head));
  return std::unique_ptr<Model>(std::move(m));
}

ArchitectureInfo Decoder(std::string name, std::string family, ModelFactory factory, HeadKind head,
                         Task task) {
  ArchitectureInfo a;
  a.name = std::move(name);
  a.family = std::move(family);
  a.prefixes = {"model.", ""};
  a.probe = "embed_tokens.weight";
  a.causal = true;
  a.pooling = DefaultPooling::kLast;
  a.head = head;
  a.default_task = task;
  a.factory = factory;
  return a;
}

// Causal LMs generate by default (as vLLM); a sluice.json naming yes/no tokens, task "score"
// or --task score makes one a causal-LM reranker (src/pooling/head.cc).
SLUICE_REGISTER_ARCHITECTURES({
    Decoder("Qwen3Model", "qwen3", CreateDecoder<Family::kQwen3>, HeadKind::kNone, Task::kEmbed),
    Decoder("Qwen3ForSequenceClassification", "qwen3", CreateDecoder<Family::kQwen3>,
            HeadKind::kScoreLast, Task::kClassify),
    Decoder("Qwen3ForCausalLM", "qwen3", CreateDecoder<Family::kQwen3>, HeadKind::kLanguageModel,
            Task::kGenerate),
    Decoder("Qwen2ForCausalLM", "qwen2", CreateDecoder<Family::kQwen2>, HeadKind::kLanguageModel,
            Task::kGenerate),
    Decoder("LlamaForCausalLM", "llama", CreateDecoder<Family::kLlama>, HeadKind::kLanguageModel,
            Task::kGenerate),
    Decoder("MistralForCausalLM", "mistral", CreateDecoder<Family::kMistral>,
            HeadKind::kLanguageModel, Task::kGenerate),
});

}  // namespace

}  // namespace sluice
