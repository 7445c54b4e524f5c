// CLIP (OpenAI's contrastive image-text model, transformers' CLIPModel and the towers alone:
// CLIPVisionModelWithProjection, CLIPTextModelWithProjection): the vision transformer and
// the text transformer, each followed by its projection into the shared embedding space.
//
// Vision:  patches = conv(pixels, patch_size, stride patch_size, no bias)   (as one GEMM)
//          h = [class_embedding; patches] + position_embedding; h = pre_layrnorm(h)
//          layers (pre-norm): h += out_proj(attention(LN1(h))); h += fc2(act(fc1(LN2(h))))
//          image_embeds = visual_projection(post_layernorm(h[0]))
// Text:    h = token_embedding[ids] + position_embedding[0..n)
//          the same layers with a causal mask; h = final_layer_norm(h)
//          text_embeds = text_projection(h[eos])
// The text is pooled at its EOS token: with eos_token_id 2 (the legacy configs of the
// original checkpoints) at the position of the highest token id (transformers' rule, which
// assumes EOS is the largest id); otherwise at the first token equal to eos_token_id
// (position 0 if there is none). logits = exp(logit_scale) * cos(image, text).
//
// Inputs are unpadded (every sequence its own length; images all of the processor's size).
// Batches are packed like every sluice model: a row's result does not depend on the batch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"

namespace sluice {

struct ClipTowerConfig {
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  double layer_norm_eps = 1e-5;
  std::string hidden_act = "quick_gelu";
  // text
  int vocab_size = 0;
  int max_position_embeddings = 0;
  int eos_token_id = 2;
  // vision
  int image_size = 0;
  int patch_size = 0;
  int num_channels = 3;
};

class ClipModel {
 public:
  // A model directory whose config.json names CLIPModel, CLIPVisionModelWithProjection or
  // CLIPTextModelWithProjection. dtype: compute dtype of the linear weights.
  static StatusOr<std::unique_ptr<ClipModel>> Load(const std::string& dir, Backend* backend,
                                                   DType dtype);
  static bool IsClipArchitecture(const std::string& architecture);
  ~ClipModel();

  bool has_text() const { return has_text_; }
  bool has_vision() const { return has_vision_; }
  int projection_dim() const { return projection_dim_; }
  float logit_scale() const { return logit_scale_; }  // as stored (the log of the scale)
  const ClipTowerConfig& text_config() const { return text_; }
  const ClipTowerConfig& vision_config() const { return vision_; }
  // Pixel values per image: num_channels x image_size x image_size floats.
  int64_t pixels_per_image() const;

  // Projected, unnormalised text embeddings [n, projection_dim] (row-major) of token ids.
  StatusOr<std::vector<float>> EmbedTexts(const std::vector<std::vector<int32_t>>& ids);
  // Projected, unnormalised image embeddings [n, projection_dim] of n images' pixel values
  // (n * pixels_per_image() floats, channels first, as media::Preprocess writes them).
  StatusOr<std::vector<float>> EmbedImages(const float* pixels, int64_t n);

  // Values per image in the patch layout: 1 + (image_size / patch_size)^2 rows of
  // num_channels * patch_size^2 values, a zero row (the class token's) and then the patches
  // in raster order, each (channel, row, column): what media::NormalizePatches writes.
  int64_t patch_values_per_image() const;
  // `count` images in the patch layout at `values`.
  struct PatchSpan {
    const float* values;
    int64_t count;
  };
  // EmbedImages of images already in the patch layout, given as spans (the images of several
  // requests, uploaded where they lie: no host copy, no im2col), embeddings in span order.
  StatusOr<std::vector<float>> EmbedPatches(const std::vector<PatchSpan>& spans);

 private:
  struct Tower;
  ClipModel(Backend* backend, DType dtype);
  Status Run(Tower& tower, const std::vector<int32_t>& cu_seqlens, int max_seqlen, bool causal,
             Tensor h, const std::vector<int32_t>& pooled_rows, std::vector<float>* out);

  Backend* backend_;
  DType dtype_;
  bool has_text_ = false, has_vision_ = false;
  int projection_dim_ = 0;
  float logit_scale_ = 0.f;
  ClipTowerConfig text_, vision_;
  std::unique_ptr<Tower> text_tower_, vision_tower_;
  Workspace ws_;
  std::unique_ptr<Fence> done_;  // the end of a forward on an asynchronous backend
};

}  // namespace sluice
