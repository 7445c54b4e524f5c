// Writes seeded random-weight model directories (config.json + model.safetensors) of
// real model shapes, so benchmarks exercise the same load path as users' models.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace sluice::bench {

struct SyntheticTensor {
  std::string name;
  std::vector<int64_t> shape;
  float stddev = 0.02f;
  float mean = 0.f;
};

struct ShapeSpec {
  std::string name;
  std::string config_json;
  std::vector<SyntheticTensor> tensors;
  double linear_params = 0;  // parameters of the per-token linear layers (FLOPs = 2x)
  int layers = 0;
  int attn_width = 0;  // num_heads * head_dim
};

inline void WriteSafetensors(const std::string& path, const std::vector<SyntheticTensor>& ts,
                             bool bf16, uint32_t seed) {
  std::string header = "{";
  uint64_t off = 0;
  const size_t esz = bf16 ? 2 : 4;
  for (size_t i = 0; i < ts.size(); ++i) {
    int64_t n = 1;
    for (auto d : ts[i].shape) n *= d;
    header += (i ? "," : "") + std::string("\"") + ts[i].name + "\":{\"dtype\":\"" +
              (bf16 ? "BF16" : "F32") + "\",\"shape\":[";
    for (size_t k = 0; k < ts[i].shape.size(); ++k) {
      header += (k ? "," : "") + std::to_string(ts[i].shape[k]);
    }
    header +=
        "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + n * esz) + "]}";
    off += n * esz;
  }
  header += "}";
  std::ofstream f(path, std::ios::binary);
  const uint64_t hl = header.size();
  f.write(reinterpret_cast<const char*>(&hl), 8);
  f << header;
  std::mt19937 rng(seed);
  std::vector<char> buf;
  for (const auto& t : ts) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    std::normal_distribution<float> dist(t.mean, t.stddev);
    buf.resize(static_cast<size_t>(n) * esz);
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng);
      if (bf16) {
        const uint16_t b = F32ToBF16(v);
        std::memcpy(buf.data() + i * 2, &b, 2);
      } else {
        std::memcpy(buf.data() + i * 4, &v, 4);
      }
    }
    f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
}

// BERT-family cross-encoder (BertForSequenceClassification, num_labels = 1).
inline ShapeSpec BertCrossEncoder(const std::string& name, int hidden, int layers, int heads,
                                  int inter, int vocab = 30522) {
  ShapeSpec s;
  s.name = name;
  s.layers = layers;
  s.attn_width = hidden;
  s.config_json =
      "{\"architectures\":[\"BertForSequenceClassification\"],\"model_type\":\"bert\","
      "\"hidden_size\":" +
      std::to_string(hidden) + ",\"num_hidden_layers\":" + std::to_string(layers) +
      ",\"num_attention_heads\":" + std::to_string(heads) +
      ",\"intermediate_size\":" + std::to_string(inter) +
      ",\"vocab_size\":" + std::to_string(vocab) +
      ",\"max_position_embeddings\":512,\"type_vocab_size\":2,\"hidden_act\":\"gelu\","
      "\"layer_norm_eps\":1e-12,\"num_labels\":1,\"id2label\":{\"0\":\"LABEL_0\"}}";
  const int64_t H = hidden, I = inter;
  auto& t = s.tensors;
  t.push_back({"bert.embeddings.word_embeddings.weight", {vocab, H}});
  t.push_back({"bert.embeddings.position_embeddings.weight", {512, H}});
  t.push_back({"bert.embeddings.token_type_embeddings.weight", {2, H}});
  t.push_back({"bert.embeddings.LayerNorm.weight", {H}, 0.02f, 1.f});
  t.push_back({"bert.embeddings.LayerNorm.bias", {H}});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      t.push_back({p + m + ".weight", {H, H}});
      t.push_back({p + m + ".bias", {H}});
    }
    t.push_back({p + "attention.output.LayerNorm.weight", {H}, 0.02f, 1.f});
    t.push_back({p + "attention.output.LayerNorm.bias", {H}});
    t.push_back({p + "intermediate.dense.weight", {I, H}});
    t.push_back({p + "intermediate.dense.bias", {I}});
    t.push_back({p + "output.dense.weight", {H, I}});
    t.push_back({p + "output.dense.bias", {H}});
    t.push_back({p + "output.LayerNorm.weight", {H}, 0.02f, 1.f});
    t.push_back({p + "output.LayerNorm.bias", {H}});
  }
  t.push_back({"bert.pooler.dense.weight", {H, H}});
  t.push_back({"bert.pooler.dense.bias", {H}});
  t.push_back({"classifier.weight", {1, H}});
  t.push_back({"classifier.bias", {1}});
  s.linear_params = static_cast<double>(layers) * (4.0 * H * H + 2.0 * H * I);
  return s;
}

// Qwen3-0.6B-shaped causal-LM yes/no reranker (Qwen3ForCausalLM, tied embeddings).
inline ShapeSpec Qwen3Reranker(const std::string& name, int hidden = 1024, int layers = 28,
                               int heads = 16, int kv_heads = 8, int head_dim = 128,
                               int inter = 3072, int vocab = 151669) {
  ShapeSpec s;
  s.name = name;
  s.layers = layers;
  s.attn_width = heads * head_dim;
  s.config_json =
      "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":" +
      std::to_string(hidden) + ",\"num_hidden_layers\":" + std::to_string(layers) +
      ",\"num_attention_heads\":" + std::to_string(heads) +
      ",\"num_key_value_heads\":" + std::to_string(kv_heads) +
      ",\"head_dim\":" + std::to_string(head_dim) +
      ",\"intermediate_size\":" + std::to_string(inter) +
      ",\"vocab_size\":" + std::to_string(vocab) +
      ",\"max_position_embeddings\":40960,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000,"
      "\"hidden_act\":\"silu\",\"tie_word_embeddings\":true}";
  const int64_t H = hidden, I = inter, D = head_dim, Q = heads * D, KV = kv_heads * D;
  auto& t = s.tensors;
  t.push_back({"model.embed_tokens.weight", {vocab, H}});
  t.push_back({"model.norm.weight", {H}, 0.02f, 1.f});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "self_attn.q_proj.weight", {Q, H}});
    t.push_back({p + "self_attn.k_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.v_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.o_proj.weight", {H, Q}});
    t.push_back({p + "self_attn.q_norm.weight", {D}, 0.02f, 1.f});
    t.push_back({p + "self_attn.k_norm.weight", {D}, 0.02f, 1.f});
    t.push_back({p + "mlp.gate_proj.weight", {I, H}});
    t.push_back({p + "mlp.up_proj.weight", {I, H}});
    t.push_back({p + "mlp.down_proj.weight", {H, I}});
    t.push_back({p + "input_layernorm.weight", {H}, 0.02f, 1.f});
    t.push_back({p + "post_attention_layernorm.weight", {H}, 0.02f, 1.f});
  }
  s.linear_params = static_cast<double>(layers) * (2.0 * H * Q + 2.0 * H * KV + 3.0 * H * I);
  return s;
}

// Writes the directory (idempotent: skipped when it already exists with this config).
inline std::string WriteModelDir(const ShapeSpec& s, const std::string& root, bool bf16) {
  namespace fs = std::filesystem;
  const std::string dir = root + "/" + s.name + (bf16 ? "-bf16" : "-f32");
  std::string cfg = s.config_json;
  cfg.insert(cfg.size() - 1, std::string(",\"dtype\":\"") + (bf16 ? "bfloat16" : "float32") + "\"");
  if (fs::exists(dir + "/config.json") && fs::exists(dir + "/model.safetensors")) {
    std::ifstream in(dir + "/config.json");
    std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (old == cfg) return dir;
  }
  fs::create_directories(dir);
  WriteSafetensors(dir + "/model.safetensors", s.tensors, bf16, 1234);
  std::ofstream(dir + "/config.json") << cfg;
  if (s.config_json.find("Qwen3ForCausalLM") != std::string::npos) {
    std::ofstream(dir + "/sluice.json") << R"({"yes_token_id": 9693, "no_token_id": 2152})";
  }
  return dir;
}

}  // namespace sluice::bench
