// BERT family encoders: BertModel and RobertaModel/XLMRobertaModel (post-norm, absolute
// learned positions, token types). RoBERTa differs only in its position ids, which start
// at padding_idx + 1.
#include <cmath>

#include "models/layers.h"
#include "models/model.h"
#include "models/registry.h"

namespace sluice {

namespace {

struct BertLayer {
  std::unique_ptr<LinearWeight> qkv, attn_out, ffn_in, ffn_out;
  Buffer ln1_w, ln1_b, ln2_w, ln2_b;
};

enum Slot { kHidden, kQkv, kAttn, kTmp, kInter, kHiddenRows, kAttnRows, kTmpRows, kInterRows };

class BertModel final : public Model {
 public:
  BertModel(ModelConfig config, Backend* backend, DType dtype, bool roberta)
      : Model(std::move(config), backend, dtype), roberta_(roberta) {}

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
    if (c.position_embedding_type != "absolute") {
      return Unsupported("position_embedding_type \"" + c.position_embedding_type +
                         "\" is not supported (only \"absolute\")");
    }
    ASSIGN_OR_RETURN(act_, ParseActivation(c.hidden_act));
    WeightLoader w(store, backend_, prefix, dtype_);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    ASSIGN_OR_RETURN(word_, w.Table("embeddings.word_embeddings.weight", c.vocab_size, H));
    ASSIGN_OR_RETURN(
        pos_, w.Table("embeddings.position_embeddings.weight", c.max_position_embeddings, H));
    if (c.type_vocab_size > 0) {
      ASSIGN_OR_RETURN(type_,
                       w.Table("embeddings.token_type_embeddings.weight", c.type_vocab_size, H));
    }
    ASSIGN_OR_RETURN(emb_ln_w_,
                     w.VectorAny({"embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"}, H));
    ASSIGN_OR_RETURN(emb_ln_b_,
                     w.VectorAny({"embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta"}, H));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "encoder.layer." + std::to_string(l) + ".";
      BertLayer L;
      ASSIGN_OR_RETURN(L.qkv, w.FusedLinear({p + "attention.self.query", p + "attention.self.key",
                                             p + "attention.self.value"},
                                            {H, H, H}, H, true));
      ASSIGN_OR_RETURN(L.attn_out, w.Linear(p + "attention.output.dense", H, H, true));
      ASSIGN_OR_RETURN(L.ln1_w, w.VectorAny({p + "attention.output.LayerNorm.weight",
                                             p + "attention.output.LayerNorm.gamma"},
                                            H));
      ASSIGN_OR_RETURN(L.ln1_b, w.VectorAny({p + "attention.output.LayerNorm.bias",
                                             p + "attention.output.LayerNorm.beta"},
                                            H));
      ASSIGN_OR_RETURN(L.ffn_in, w.Linear(p + "intermediate.dense", I, H, true));
      ASSIGN_OR_RETURN(L.ffn_out, w.Linear(p + "output.dense", H, I, true));
      ASSIGN_OR_RETURN(
          L.ln2_w, w.VectorAny({p + "output.LayerNorm.weight", p + "output.LayerNorm.gamma"}, H));
      ASSIGN_OR_RETURN(L.ln2_b,
                       w.VectorAny({p + "output.LayerNorm.bias", p + "output.LayerNorm.beta"}, H));
      layers_.push_back(std::move(L));
    }
    return Status::Ok();
  }

  int max_sequence_length() const override {
    return config_.max_position_embeddings - position_offset();
  }

  // h = LN(attn·Wo + b + h); h = LN(FFN(h) + h), over the rows of attn/h.
  void PostAttention(const BertLayer& L, Tensor attn, Tensor h, Tensor tmp, Tensor inter,
                     float eps) {
    backend_->Linear({L.attn_out.get(), attn, tmp, Activation::kNone, &h});
    backend_->LayerNorm(tmp, nullptr, L.ln1_w.t(), &L.ln1_b.t(), eps, h);
    backend_->Linear({L.ffn_in.get(), h, inter, act_});
    backend_->Linear({L.ffn_out.get(), inter, tmp, Activation::kNone, &h});
    backend_->LayerNorm(tmp, nullptr, L.ln2_w.t(), &L.ln2_b.t(), eps, h);
  }

  bool SupportsKeyLimits() const override { return true; }

  StatusOr<Tensor> Forward(const DeviceBatch& b, Workspace& ws) override {
    const auto& c = config_;
    const int64_t T = b.num_tokens, H = c.hidden_size, I = c.intermediate_size;
    const float eps = static_cast<float>(c.layer_norm_eps);
    // Hidden states are in the backend's activation dtype (f32 on CPU; bf16/f16 on CUDA
    // next to bf16/f16 weights, which is what transformers computes in for a post-norm
    // encoder); QKV, the attention output and the MLP intermediate in its inner activation
    // dtype (the same on CUDA; bf16 on CPU next to bf16 weights, as transformers' bf16
    // autocast keeps them); LayerNorm statistics are fp32.
    const DType A = backend_->ActivationDType(dtype_);
    const DType P = backend_->InnerActivationDType(dtype_);
    Tensor h = ws.Get(kHidden, A, T, H);
    Tensor qkv = ws.Get(kQkv, P, T, 3 * H);
    Tensor attn = ws.Get(kAttn, P, T, H);
    Tensor tmp = ws.Get(kTmp, A, T, H);
    Tensor inter = ws.Get(kInter, P, T, I);

    backend_->EmbeddingGather(word_.t(), b.ids.ptr<int32_t>(), T, h, false);
    backend_->EmbeddingGather(pos_.t(), b.positions.ptr<int32_t>(), T, h, true);
    if (!type_.empty()) backend_->EmbeddingGather(type_.t(), b.type_ids.ptr<int32_t>(), T, h, true);
    backend_->LayerNorm(h, nullptr, emb_ln_w_.t(), &emb_ln_b_.t(), eps, h);

    AttentionParams ap;
    ap.cu_seqlens = b.cu_seqlens.ptr<int32_t>();
    ap.num_seqs = b.num_seqs;
    ap.max_seqlen = b.max_seqlen;
    ap.num_heads = ap.num_kv_heads = c.num_attention_heads;
    ap.head_dim = static_cast<int>(H / c.num_attention_heads);
    ap.scale = 1.0f / std::sqrt(static_cast<float>(ap.head_dim));
    ap.products = AttentionProducts(dtype_);
    ap.causal = false;
    ap.key_lens = b.key_lens.ptr<int32_t>();  // ColBERT expansion tokens, or null
    ap.seq_capacity = b.seq_capacity;
    const bool prune = b.output_rows.data != nullptr;
    const int64_t S = b.num_output_rows;
    const int32_t* rows = b.output_rows.ptr<int32_t>();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const BertLayer& L = layers_[l];
      backend_->Linear({L.qkv.get(), h, qkv});
      ap.q = qkv.ColSlice(0, H);
      ap.k = qkv.ColSlice(H, H);
      ap.v = qkv.ColSlice(2 * H, H);
      ap.out = attn;
      backend_->Attention(ap);
      if (prune && l + 1 == layers_.size()) {
        // Last layer: only the output rows need the o-proj, MLP and norms.
        Tensor hs = ws.Get(kHiddenRows, A, S, H);
        Tensor as = ws.Get(kAttnRows, P, S, H);
        backend_->GatherRows(attn, rows, S, as);
        backend_->GatherRows(h, rows, S, hs);
        PostAttention(L, as, hs, ws.Get(kTmpRows, A, S, H), ws.Get(kInterRows, P, S, I), eps);
        return hs;
      }
      PostAttention(L, attn, h, tmp, inter, eps);
    }
    if (prune) {
      Tensor hs = ws.Get(kHiddenRows, A, S, H);
      backend_->GatherRows(h, rows, S, hs);
      return hs;
    }
    return h;
  }

 protected:
  // RoBERTa/XLM-R: position ids start after padding_idx (pad_token_id, usually 1).
  int position_offset() const override {
    return roberta_ ? config_.pad_token_id.value_or(1) + 1 : 0;
  }

 private:
  bool roberta_;
  Activation act_ = Activation::kGeluErf;
  Buffer word_, pos_, type_, emb_ln_w_, emb_ln_b_;
  std::vector<BertLayer> layers_;
};

template <bool kRoberta>
StatusOr<std::unique_ptr<Model>> CreateBertModel(const ModelConfig& config,
                                                 const WeightStore& weights, Backend* backend,
                                                 const ModelLoadOptions& options) {
  auto m = std::make_unique<BertModel>(config, backend, options.dtype, kRoberta);
  RETURN_IF_ERROR(m->Load(weights, options.prefix));
  return std::unique_ptr<Model>(std::move(m));
}

ArchitectureInfo Encoder(std::string name, std::string family, std::string prefix, HeadKind head,
                         Task task, ModelFactory factory) {
  ArchitectureInfo a;
  a.name = std::move(name);
  a.family = std::move(family);
  a.prefixes = {std::move(prefix), "", "bert.", "roberta.", "model."};
  a.probe = "embeddings.word_embeddings.weight";
  a.pooling = DefaultPooling::kFirst;
  a.head = head;
  a.default_task = task;
  a.factory = factory;
  return a;
}

SLUICE_REGISTER_ARCHITECTURES({
    Encoder("BertModel", "bert", "", HeadKind::kNone, Task::kEmbed, CreateBertModel<false>),
    Encoder("BertForSequenceClassification", "bert", "bert.", HeadKind::kBertPoolerClassifier,
            Task::kClassify, CreateBertModel<false>),
    Encoder("RobertaModel", "roberta", "", HeadKind::kNone, Task::kEmbed, CreateBertModel<true>),
    Encoder("RobertaForSequenceClassification", "roberta", "roberta.", HeadKind::kRobertaClassifier,
            Task::kClassify, CreateBertModel<true>),
    Encoder("XLMRobertaModel", "roberta", "", HeadKind::kNone, Task::kEmbed, CreateBertModel<true>),
    Encoder("XLMRobertaForSequenceClassification", "roberta", "roberta.",
            HeadKind::kRobertaClassifier, Task::kClassify, CreateBertModel<true>),
    Encoder("BertForTokenClassification", "bert", "bert.", HeadKind::kTokenClassifier,
            Task::kTokenClassify, CreateBertModel<false>),
    Encoder("RobertaForTokenClassification", "roberta", "roberta.", HeadKind::kTokenClassifier,
            Task::kTokenClassify, CreateBertModel<true>),
    Encoder("XLMRobertaForTokenClassification", "roberta", "roberta.", HeadKind::kTokenClassifier,
            Task::kTokenClassify, CreateBertModel<true>),
});

}  // namespace

}  // namespace sluice
