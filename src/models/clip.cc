#include "models/clip.h"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/host_convert.h"
#include "models/layers.h"
#include "weights/safetensors.h"

namespace sluice {

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// Reads the fields of a tower config (absent = default; wrong type = error).
Status ParseTower(object o, const std::string& origin, ClipTowerConfig* c) {
  auto get_int = [&](const char* key, int* out) -> Status {
    element e;
    if (o.at_key(key).get(e) || e.is_null()) return Status::Ok();
    int64_t v;
    if (e.get(v)) return InvalidArgument(origin + ": \"" + key + "\" must be an integer");
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  RETURN_IF_ERROR(get_int("hidden_size", &c->hidden_size));
  RETURN_IF_ERROR(get_int("intermediate_size", &c->intermediate_size));
  RETURN_IF_ERROR(get_int("num_hidden_layers", &c->num_hidden_layers));
  RETURN_IF_ERROR(get_int("num_attention_heads", &c->num_attention_heads));
  RETURN_IF_ERROR(get_int("vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(get_int("max_position_embeddings", &c->max_position_embeddings));
  RETURN_IF_ERROR(get_int("eos_token_id", &c->eos_token_id));
  RETURN_IF_ERROR(get_int("image_size", &c->image_size));
  RETURN_IF_ERROR(get_int("patch_size", &c->patch_size));
  RETURN_IF_ERROR(get_int("num_channels", &c->num_channels));
  element e;
  if (!o.at_key("layer_norm_eps").get(e) && !e.is_null()) {
    double v;
    if (e.get(v)) return InvalidArgument(origin + ": \"layer_norm_eps\" must be a number");
    c->layer_norm_eps = v;
  }
  if (!o.at_key("hidden_act").get(e) && !e.is_null()) {
    std::string_view v;
    if (e.get(v)) return InvalidArgument(origin + ": \"hidden_act\" must be a string");
    c->hidden_act = std::string(v);
  }
  if (c->hidden_size <= 0 || c->intermediate_size <= 0 || c->num_hidden_layers <= 0 ||
      c->num_attention_heads <= 0 || c->hidden_size % c->num_attention_heads != 0) {
    return InvalidArgument(origin +
                           ": hidden_size, intermediate_size, num_hidden_layers and "
                           "num_attention_heads must be positive, hidden_size divisible by "
                           "num_attention_heads");
  }
  return Status::Ok();
}

enum Slot {
  kH,
  kX,
  kQkv,
  kAttn,
  kMlp,
  kRows,
  kRowsNorm,
  kProj,
  kPatches,
  kEmb,
  kIds,
  kPositions,
  kCuSeqlens,
  kRowIds,
};

}  // namespace

struct ClipModel::Tower {
  struct Layer {
    std::unique_ptr<LinearWeight> qkv, out, fc1, fc2;
    Buffer ln1_w, ln1_b, ln2_w, ln2_b;
  };
  ClipTowerConfig config;
  Activation act = Activation::kQuickGelu;
  std::vector<Layer> layers;
  Buffer final_w, final_b;  // text: final_layer_norm; vision: post_layernorm
  Buffer pre_w, pre_b;      // vision: pre_layrnorm
  Buffer token_embedding;   // text [vocab, H]
  Buffer positions;         // text: position_embedding [P, H]; vision: position_embedding
                            // with the class embedding added to row 0 [patches + 1, H]
  std::unique_ptr<LinearWeight> patch;       // vision: [H, C * p * p], no bias
  std::unique_ptr<LinearWeight> projection;  // [projection_dim, H], no bias
};

bool ClipModel::IsClipArchitecture(const std::string& a) {
  return a == "CLIPModel" || a == "CLIPVisionModelWithProjection" ||
         a == "CLIPTextModelWithProjection";
}

ClipModel::ClipModel(Backend* backend, DType dtype)
    : backend_(backend), dtype_(dtype), ws_(backend) {}
ClipModel::~ClipModel() = default;

int64_t ClipModel::pixels_per_image() const {
  return static_cast<int64_t>(vision_.num_channels) * vision_.image_size * vision_.image_size;
}

StatusOr<std::unique_ptr<ClipModel>> ClipModel::Load(const std::string& dir, Backend* backend,
                                                     DType dtype) {
  if (dtype == DType::kI8) {
    return Unsupported(
        "--dtype int8 is for text scoring models (BERT, RoBERTa, XLM-R, ModernBERT, Qwen3 "
        "poolers); CLIP runs in float32 or bfloat16");
  }
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  simdjson::dom::parser parser;
  object root;
  if (auto err = parser.parse(json).get(root)) {
    return InvalidArgument(path + ": invalid JSON: " + simdjson::error_message(err));
  }
  std::string arch;
  simdjson::dom::array archs;
  if (!root.at_key("architectures").get(archs) && archs.size() > 0) {
    std::string_view a;
    if (!archs.at(0).get(a)) arch = std::string(a);
  }
  if (!IsClipArchitecture(arch)) {
    return InvalidArgument(path + ": architecture \"" + arch + "\" is not a CLIP model");
  }
  std::unique_ptr<ClipModel> m(new ClipModel(backend, dtype));
  int64_t proj = 0;
  element e;
  if (!root.at_key("projection_dim").get(e)) {
    if (e.get(proj) || proj <= 0) {
      return InvalidArgument(path + ": projection_dim must be a positive integer");
    }
  } else {
    proj = 512;  // transformers' default
  }
  m->projection_dim_ = static_cast<int>(proj);
  if (arch == "CLIPModel") {
    object t, v;
    if (root.at_key("text_config").get(t) || root.at_key("vision_config").get(v)) {
      return InvalidArgument(path + ": CLIPModel needs text_config and vision_config objects");
    }
    RETURN_IF_ERROR(ParseTower(t, path + " text_config", &m->text_));
    RETURN_IF_ERROR(ParseTower(v, path + " vision_config", &m->vision_));
    m->has_text_ = m->has_vision_ = true;
  } else if (arch == "CLIPTextModelWithProjection") {
    RETURN_IF_ERROR(ParseTower(root, path, &m->text_));
    m->has_text_ = true;
  } else {
    RETURN_IF_ERROR(ParseTower(root, path, &m->vision_));
    m->has_vision_ = true;
  }
  if (m->has_text_ && (m->text_.vocab_size <= 0 || m->text_.max_position_embeddings <= 0)) {
    return InvalidArgument(path + ": the text tower needs vocab_size and max_position_embeddings");
  }
  if (m->has_vision_ &&
      (m->vision_.image_size <= 0 || m->vision_.patch_size <= 0 || m->vision_.num_channels <= 0 ||
       m->vision_.image_size % m->vision_.patch_size != 0)) {
    return InvalidArgument(path +
                           ": the vision tower needs image_size, patch_size (dividing it) and "
                           "num_channels");
  }

  ASSIGN_OR_RETURN(WeightStore store, WeightStore::OpenDirectory(dir));
  auto load_tower = [&](const std::string& prefix, const ClipTowerConfig& c,
                        const std::string& final_norm, const std::string& projection,
                        std::unique_ptr<Tower>* out) -> Status {
    auto t = std::make_unique<Tower>();
    t->config = c;
    ASSIGN_OR_RETURN(t->act, ParseActivation(c.hidden_act));
    WeightLoader w(store, backend, prefix, dtype);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "encoder.layers." + std::to_string(l) + ".";
      Tower::Layer L;
      ASSIGN_OR_RETURN(L.qkv, w.FusedLinear({p + "self_attn.q_proj", p + "self_attn.k_proj",
                                             p + "self_attn.v_proj"},
                                            {H, H, H}, H, true));
      ASSIGN_OR_RETURN(L.out, w.Linear(p + "self_attn.out_proj", H, H, true));
      ASSIGN_OR_RETURN(L.fc1, w.Linear(p + "mlp.fc1", I, H, true));
      ASSIGN_OR_RETURN(L.fc2, w.Linear(p + "mlp.fc2", H, I, true));
      ASSIGN_OR_RETURN(L.ln1_w, w.Vector(p + "layer_norm1.weight", H));
      ASSIGN_OR_RETURN(L.ln1_b, w.Vector(p + "layer_norm1.bias", H));
      ASSIGN_OR_RETURN(L.ln2_w, w.Vector(p + "layer_norm2.weight", H));
      ASSIGN_OR_RETURN(L.ln2_b, w.Vector(p + "layer_norm2.bias", H));
      t->layers.push_back(std::move(L));
    }
    ASSIGN_OR_RETURN(t->final_w, w.Vector(final_norm + ".weight", H));
    ASSIGN_OR_RETURN(t->final_b, w.Vector(final_norm + ".bias", H));
    WeightLoader top(store, backend, "", dtype);
    ASSIGN_OR_RETURN(t->projection, top.Linear(projection, proj, H, false));
    *out = std::move(t);
    return Status::Ok();
  };

  if (m->has_text_) {
    const ClipTowerConfig& c = m->text_;
    RETURN_IF_ERROR(
        load_tower("text_model.", c, "final_layer_norm", "text_projection", &m->text_tower_));
    WeightLoader w(store, backend, "text_model.", dtype);
    ASSIGN_OR_RETURN(m->text_tower_->token_embedding,
                     w.Table("embeddings.token_embedding.weight", c.vocab_size, c.hidden_size));
    ASSIGN_OR_RETURN(HostTensor pos, store.Get("text_model.embeddings.position_embedding.weight",
                                               {c.max_position_embeddings, c.hidden_size}));
    ASSIGN_OR_RETURN(m->text_tower_->positions, backend->Upload(pos, DType::kF32));
  }
  if (m->has_vision_) {
    const ClipTowerConfig& c = m->vision_;
    RETURN_IF_ERROR(
        load_tower("vision_model.", c, "post_layernorm", "visual_projection", &m->vision_tower_));
    Tower& t = *m->vision_tower_;
    const int64_t H = c.hidden_size, p = c.patch_size, grid = c.image_size / c.patch_size;
    const int64_t P = grid * grid + 1;
    WeightLoader w(store, backend, "vision_model.", dtype);
    ASSIGN_OR_RETURN(t.pre_w, w.Vector("pre_layrnorm.weight", H));
    ASSIGN_OR_RETURN(t.pre_b, w.Vector("pre_layrnorm.bias", H));
    ASSIGN_OR_RETURN(HostTensor conv, store.Get("vision_model.embeddings.patch_embedding.weight",
                                                {H, c.num_channels, p, p}));
    if (store.Has("vision_model.embeddings.patch_embedding.bias")) {
      return Unsupported(dir + ": a CLIP patch embedding with a bias is not supported");
    }
    HostTensor conv2d = conv;
    conv2d.shape = {H, c.num_channels * p * p};
    ASSIGN_OR_RETURN(t.patch, backend->PrepareLinear(conv2d, nullptr, dtype));
    ASSIGN_OR_RETURN(HostTensor cls, store.Get("vision_model.embeddings.class_embedding", {H}));
    ASSIGN_OR_RETURN(HostTensor pos,
                     store.Get("vision_model.embeddings.position_embedding.weight", {P, H}));
    std::vector<float> cls_f, table;
    RETURN_IF_ERROR(HostToF32(cls, &cls_f));
    RETURN_IF_ERROR(HostToF32(pos, &table));
    // Row 0 embeds the class token: its "patch" input is zero (no conv bias), so the class
    // embedding rides on its position row.
    for (int64_t i = 0; i < H; ++i) table[i] += cls_f[i];
    HostTensor ht{table.data(), DType::kF32, {P, H}, "vision position + class embedding"};
    ASSIGN_OR_RETURN(t.positions, backend->Upload(ht, DType::kF32));
  }
  if (store.Has("logit_scale")) {
    ASSIGN_OR_RETURN(HostTensor ls, store.Get("logit_scale"));
    if (ls.numel() != 1) return InvalidArgument(dir + ": logit_scale must hold one value");
    std::vector<float> v;
    RETURN_IF_ERROR(HostToF32(ls, &v));
    m->logit_scale_ = v[0];
  }
  return m;
}

Status ClipModel::Run(Tower& tower, const std::vector<int32_t>& cu_seqlens, int max_seqlen,
                      bool causal, Tensor h, const std::vector<int32_t>& pooled_rows,
                      std::vector<float>* out) {
  const ClipTowerConfig& c = tower.config;
  const int64_t T = h.rows, H = c.hidden_size, I = c.intermediate_size;
  const int64_t S = static_cast<int64_t>(pooled_rows.size());
  const int heads = c.num_attention_heads, D = static_cast<int>(H / heads);
  const float eps = static_cast<float>(c.layer_norm_eps);
  const DType A = backend_->ActivationDType(dtype_);
  Tensor x = ws_.Get(kX, A, T, H);
  Tensor qkv = ws_.Get(kQkv, A, T, 3 * H);
  Tensor attn = ws_.Get(kAttn, A, T, H);
  Tensor mlp = ws_.Get(kMlp, A, T, I);
  Tensor cu = ws_.Get(kCuSeqlens, DType::kI32, 1, static_cast<int64_t>(cu_seqlens.size()));
  backend_->CopyFromHost(cu_seqlens.data(), cu);
  Tensor rows = ws_.Get(kRowIds, DType::kI32, 1, S);
  backend_->CopyFromHost(pooled_rows.data(), rows);

  AttentionParams ap;
  ap.cu_seqlens = cu.ptr<int32_t>();
  ap.num_seqs = static_cast<int>(cu_seqlens.size()) - 1;
  ap.max_seqlen = max_seqlen;
  ap.max_context = max_seqlen;
  ap.num_heads = ap.num_kv_heads = heads;
  ap.head_dim = D;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
  ap.products = AttentionProducts(dtype_);
  ap.causal = causal;
  for (const Tower::Layer& L : tower.layers) {
    backend_->LayerNorm(h, nullptr, L.ln1_w.t(), &L.ln1_b.t(), eps, x);
    backend_->Linear({L.qkv.get(), x, qkv});
    ap.q = qkv.ColSlice(0, H);
    ap.k = qkv.ColSlice(H, H);
    ap.v = qkv.ColSlice(2 * H, H);
    ap.out = attn;
    backend_->Attention(ap);
    backend_->Linear({L.out.get(), attn, h, Activation::kNone, &h});
    backend_->LayerNorm(h, nullptr, L.ln2_w.t(), &L.ln2_b.t(), eps, x);
    backend_->Linear({L.fc1.get(), x, mlp, tower.act});
    backend_->Linear({L.fc2.get(), mlp, h, Activation::kNone, &h});
  }
  Tensor r = ws_.Get(kRows, DType::kF32, S, H);
  backend_->GatherRows(h, rows.ptr<int32_t>(), S, r);
  Tensor rn = ws_.Get(kRowsNorm, A, S, H);
  backend_->LayerNorm(r, nullptr, tower.final_w.t(), &tower.final_b.t(), eps, rn);
  Tensor p = ws_.Get(kProj, DType::kF32, S, projection_dim_);
  backend_->Linear({tower.projection.get(), rn, p});
  if (backend_->asynchronous()) {
    // Wait for the forward (milliseconds on a GPU) without spinning on a core: the image
    // decoders of the same process need every core, and a synchronous copy would spin the
    // engine thread for the whole forward. Polled every 50 us.
    if (!done_) done_ = backend_->CreateFence();
    done_->Record();
    while (!done_->Done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  out->resize(static_cast<size_t>(S) * projection_dim_);
  backend_->CopyToHostF32(p, out->data());
  backend_->Synchronize();
  return Status::Ok();
}

StatusOr<std::vector<float>> ClipModel::EmbedTexts(const std::vector<std::vector<int32_t>>& ids) {
  if (!has_text_) return FailedPrecondition("this CLIP model has no text tower");
  const ClipTowerConfig& c = text_;
  std::vector<int32_t> flat, positions, cu{0}, pooled;
  int max_len = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    const auto& seq = ids[s];
    if (seq.empty()) return InvalidArgument("text " + std::to_string(s) + " has no tokens");
    if (static_cast<int>(seq.size()) > c.max_position_embeddings) {
      return InvalidArgument("text " + std::to_string(s) + " has " + std::to_string(seq.size()) +
                             " tokens; the model takes at most " +
                             std::to_string(c.max_position_embeddings));
    }
    int pool = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      if (seq[i] < 0 || seq[i] >= c.vocab_size) {
        return InvalidArgument("text " + std::to_string(s) + ": token id " +
                               std::to_string(seq[i]) + " is outside the vocabulary (" +
                               std::to_string(c.vocab_size) + ")");
      }
      if (c.eos_token_id == 2) {
        if (seq[i] > seq[pool]) pool = static_cast<int>(i);  // first maximum
      }
      flat.push_back(seq[i]);
      positions.push_back(static_cast<int32_t>(i));
    }
    if (c.eos_token_id != 2) {
      auto it = std::find(seq.begin(), seq.end(), c.eos_token_id);
      pool = it == seq.end() ? 0 : static_cast<int>(it - seq.begin());
    }
    pooled.push_back(cu.back() + pool);
    cu.push_back(cu.back() + static_cast<int32_t>(seq.size()));
    max_len = std::max(max_len, static_cast<int>(seq.size()));
  }
  std::vector<float> out;
  if (ids.empty()) return out;
  const int64_t T = static_cast<int64_t>(flat.size());
  Tensor dids = ws_.Get(kIds, DType::kI32, 1, T);
  Tensor dpos = ws_.Get(kPositions, DType::kI32, 1, T);
  backend_->CopyFromHost(flat.data(), dids);
  backend_->CopyFromHost(positions.data(), dpos);
  Tensor h = ws_.Get(kH, DType::kF32, T, c.hidden_size);
  backend_->EmbeddingGather(text_tower_->token_embedding.t(), dids.ptr<int32_t>(), T, h, false);
  backend_->EmbeddingGather(text_tower_->positions.t(), dpos.ptr<int32_t>(), T, h, true);
  RETURN_IF_ERROR(Run(*text_tower_, cu, max_len, true, h, pooled, &out));
  return out;
}

int64_t ClipModel::patch_values_per_image() const {
  const int64_t C = vision_.num_channels, p = vision_.patch_size, grid = vision_.image_size / p;
  return (grid * grid + 1) * C * p * p;
}

StatusOr<std::vector<float>> ClipModel::EmbedImages(const float* pixels, int64_t n) {
  if (!has_vision_) return FailedPrecondition("this CLIP model has no vision tower");
  if (n <= 0) return std::vector<float>();
  const ClipTowerConfig& c = vision_;
  const int64_t C = c.num_channels, S = c.image_size, p = c.patch_size, grid = S / p;
  const int64_t P = grid * grid + 1, K = C * p * p;
  // im2col: row 0 of each image (the class token) zero, then its patches in raster order,
  // each as (channel, row, column) like the conv weight.
  std::vector<float> patches(static_cast<size_t>(n * P * K), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const float* img = pixels + i * C * S * S;
    for (int64_t gy = 0; gy < grid; ++gy) {
      for (int64_t gx = 0; gx < grid; ++gx) {
        float* row = patches.data() + (i * P + 1 + gy * grid + gx) * K;
        for (int64_t ch = 0; ch < C; ++ch) {
          for (int64_t y = 0; y < p; ++y) {
            const float* src = img + ch * S * S + (gy * p + y) * S + gx * p;
            std::copy_n(src, p, row + (ch * p + y) * p);
          }
        }
      }
    }
  }
  return EmbedPatches({{patches.data(), n}});
}

StatusOr<std::vector<float>> ClipModel::EmbedPatches(const std::vector<PatchSpan>& spans) {
  if (!has_vision_) return FailedPrecondition("this CLIP model has no vision tower");
  std::vector<float> out;
  int64_t n = 0;
  for (const PatchSpan& s : spans) n += s.count;
  if (n <= 0) return out;
  const ClipTowerConfig& c = vision_;
  const int64_t C = c.num_channels, p = c.patch_size, grid = c.image_size / p;
  const int64_t P = grid * grid + 1, K = C * p * p, T = n * P;
  std::vector<int32_t> positions(T), cu{0}, pooled;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < P; ++t) positions[i * P + t] = static_cast<int32_t>(t);
    pooled.push_back(static_cast<int32_t>(i * P));
    cu.push_back(static_cast<int32_t>((i + 1) * P));
  }
  Tensor dp = ws_.Get(kPatches, DType::kF32, T, K);
  int64_t at = 0;
  for (const PatchSpan& s : spans) {
    if (s.count <= 0) continue;
    backend_->CopyFromHost(s.values, dp.RowSlice(at * P, s.count * P));
    at += s.count;
  }
  Tensor dpos = ws_.Get(kPositions, DType::kI32, 1, T);
  backend_->CopyFromHost(positions.data(), dpos);
  Tensor emb = ws_.Get(kEmb, DType::kF32, T, c.hidden_size);
  backend_->Linear({vision_tower_->patch.get(), dp, emb});
  backend_->EmbeddingGather(vision_tower_->positions.t(), dpos.ptr<int32_t>(), T, emb, true);
  Tensor h = ws_.Get(kH, DType::kF32, T, c.hidden_size);
  backend_->LayerNorm(emb, nullptr, vision_tower_->pre_w.t(), &vision_tower_->pre_b.t(),
                      static_cast<float>(c.layer_norm_eps), h);
  RETURN_IF_ERROR(Run(*vision_tower_, cu, static_cast<int>(P), false, h, pooled, &out));
  return out;
}

}  // namespace sluice
