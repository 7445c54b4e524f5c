// CLIP parity with Hugging Face transformers (tests/fixtures/clip, written by
// tests/golden/generate_clip.py with transformers 5.17): text embeddings (projected,
// unnormalised) within the case's tolerance (1e-4 absolute). Images go through sluice's own
// decoding and processor (media/), which follows the PIL-based CLIPImageProcessor bit for
// bit (tests/unit/media); transformers 5.x's CLIPImageProcessor runs on torchvision, whose
// uint8 antialiased resize rounds some pixels one level differently and which fuses
// rescale into normalise. So: the first pixel values within 1e-6 of transformers', image
// embeddings within kImageTol = 5e-4 (1e-4 where the pixel values are identical, i.e. the
// CRC-32 of the float bytes matches), logits_per_image within the tolerance x
// exp(logit_scale). Each image and text alone and inside one batch with the others
// (duplicates included) must agree: bit-identical on the CPU, within the tolerance on CUDA.
// The towers saved alone (CLIPVisionModelWithProjection, CLIPTextModelWithProjection) must
// give the same embeddings. SLUICE_TEST_DEVICE=cuda runs the models on CUDA.
#include "models/clip.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "golden_inputs.h"
#include "media/image.h"
#include "media/preprocess.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
const std::string kClip = std::string(SLUICE_FIXTURES_DIR) + "/clip";
const std::string kImages = std::string(SLUICE_FIXTURES_DIR) + "/images";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint32_t Crc32(const void* data, size_t n) {
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::vector<float> Floats(simdjson::dom::element e) {
  std::vector<float> v;
  for (auto x : e.get_array()) v.push_back(static_cast<float>(x.get_double().value()));
  return v;
}

double MaxDiff(const float* a, const float* b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

struct Case {
  std::string name;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  double tol = 1e-4;
};

std::unique_ptr<Backend> MakeBackend() {
  BackendOptions o;
  o.device = testing::TestDevice();
  auto be = CreateBackend(o);
  EXPECT_TRUE(be.ok()) << be.status().ToString();
  return be.ok() ? std::move(be).value() : nullptr;
}

class ClipGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    json_ = ReadAll(kClip + "/" + GetParam() + "/expected.json");
    ASSERT_FALSE(parser_.parse(json_).get(doc_)) << "expected.json";
    tol_ = doc_["tolerance"].get_double().value();
    be_ = MakeBackend();
    ASSERT_NE(be_, nullptr);
  }

  // Pixel values of every fixture image through sluice's decoder and processor.
  std::vector<float> Pixels(const std::string& model_dir, int64_t per_image) {
    auto cfg = media::ParseImageProcessorConfig(ReadAll(model_dir + "/preprocessor_config.json"));
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    std::vector<float> all;
    for (auto im : doc_["images"].get_array()) {
      const std::string file(im["file"].get_string().value());
      auto img = media::DecodeImage(ReadAll(kImages + "/" + file));
      EXPECT_TRUE(img.ok()) << file << ": " << img.status().ToString();
      if (!img.ok() || !cfg.ok()) return {};
      std::vector<float> px;
      media::Preprocess(*img, *cfg, &px);
      EXPECT_EQ(static_cast<int64_t>(px.size()), per_image) << file;
      const bool same = Crc32(px.data(), px.size() * sizeof(float)) ==
                        static_cast<uint32_t>(im["pixel_crc32"].get_uint64().value());
      identical_.push_back(same);
      auto head = Floats(im["pixel_head"]);
      EXPECT_LE(MaxDiff(px.data(), head.data(), head.size()), 1e-6) << file;
      all.insert(all.end(), px.begin(), px.end());
    }
    return all;
  }

  std::vector<std::vector<int32_t>> Texts() {
    std::vector<std::vector<int32_t>> t;
    for (auto x : doc_["texts"].get_array()) {
      std::vector<int32_t> ids;
      for (auto i : x["ids"].get_array())
        ids.push_back(static_cast<int32_t>(i.get_int64().value()));
      t.push_back(ids);
    }
    return t;
  }

  // Checks a batch's embeddings against `key` of each expected entry, and each row alone.
  void CheckImages(ClipModel& m, const std::vector<float>& px) {
    const int64_t per = m.pixels_per_image(), n = static_cast<int64_t>(px.size()) / per;
    auto batch = m.EmbedImages(px.data(), n);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    const int P = m.projection_dim();
    int i = 0;
    for (auto im : doc_["images"].get_array()) {
      auto want = Floats(im["image_embeds"]);
      ASSERT_EQ(static_cast<int>(want.size()), P);
      const double tol = identical_.at(i) ? tol_ : kImageTol;
      EXPECT_LE(MaxDiff(batch->data() + i * P, want.data(), P), tol)
          << "image " << im["file"].get_string().value();
      auto alone = m.EmbedImages(px.data() + i * per, 1);
      ASSERT_TRUE(alone.ok());
      const double d = MaxDiff(alone->data(), batch->data() + i * P, P);
      if (exact_) {
        EXPECT_EQ(d, 0.0) << "image " << i << " alone vs batched";
      } else {
        EXPECT_LE(d, tol_) << "image " << i << " alone vs batched";
      }
      ++i;
    }
    image_embeds_ = *batch;
    CheckPatchSpans(m, px, *batch);
  }

  // The same images in the patch layout (media::NormalizePatches' output is checked against
  // Normalize in media_test), given to EmbedPatches as several spans of one forward — how the
  // server uploads the images of several requests — give EmbedImages' embeddings.
  void CheckPatchSpans(ClipModel& m, const std::vector<float>& px,
                       const std::vector<float>& batch) {
    const ClipTowerConfig& c = m.vision_config();
    const int64_t per = m.pixels_per_image(), n = static_cast<int64_t>(px.size()) / per;
    const int64_t S = c.image_size, p = c.patch_size, grid = S / p, K = c.num_channels * p * p;
    const int64_t pv = m.patch_values_per_image();
    ASSERT_EQ(pv, (grid * grid + 1) * K);
    std::vector<float> patches(static_cast<size_t>(n * pv), 0.f);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t ch = 0; ch < c.num_channels; ++ch) {
        for (int64_t y = 0; y < S; ++y) {
          for (int64_t x = 0; x < S; ++x) {
            patches[i * pv + (1 + (y / p) * grid + x / p) * K + (ch * p + y % p) * p + x % p] =
                px[i * per + (ch * S + y) * S + x];
          }
        }
      }
    }
    std::vector<ClipModel::PatchSpan> spans;
    for (int64_t i = 0; i < n; i += 2) {
      spans.push_back({patches.data() + i * pv, std::min<int64_t>(2, n - i)});
    }
    spans.insert(spans.begin() + 1, ClipModel::PatchSpan{patches.data(), 0});  // empty: skipped
    auto got = m.EmbedPatches(spans);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), batch.size());
    const double d = MaxDiff(got->data(), batch.data(), got->size());
    if (exact_) {
      EXPECT_EQ(d, 0.0) << "EmbedPatches (spans) vs EmbedImages";
    } else {
      EXPECT_LE(d, tol_) << "EmbedPatches (spans) vs EmbedImages";
    }
  }

  void CheckTexts(ClipModel& m) {
    auto texts = Texts();
    auto batch = m.EmbedTexts(texts);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    const int P = m.projection_dim();
    int i = 0;
    for (auto t : doc_["texts"].get_array()) {
      auto want = Floats(t["text_embeds"]);
      EXPECT_LE(MaxDiff(batch->data() + i * P, want.data(), P), tol_) << "text " << i;
      auto alone = m.EmbedTexts({texts[i]});
      ASSERT_TRUE(alone.ok());
      const double d = MaxDiff(alone->data(), batch->data() + i * P, P);
      if (exact_) {
        EXPECT_EQ(d, 0.0) << "text " << i << " alone vs batched";
      } else {
        EXPECT_LE(d, tol_) << "text " << i << " alone vs batched";
      }
      ++i;
    }
    // The fixture's last text duplicates its third: identical rows in one batch.
    EXPECT_EQ(texts.back(), texts[2]);
    EXPECT_EQ(0, std::memcmp(batch->data() + (texts.size() - 1) * P, batch->data() + 2 * P,
                             P * sizeof(float)));
    text_embeds_ = *batch;
  }

  std::string json_;
  simdjson::dom::parser parser_;
  simdjson::dom::element doc_;
  double tol_ = 1e-4;
  bool exact_ = testing::TestDevice() == DeviceKind::kCpu;
  std::unique_ptr<Backend> be_;
  std::vector<float> image_embeds_, text_embeds_;
  std::vector<bool> identical_;  // per image: pixel values identical to transformers'
  static constexpr double kImageTol = 5e-4;
};

TEST_P(ClipGolden, MatchesTransformers) {
  const std::string dir = kClip + "/" + GetParam() + "/model";
  auto m = ClipModel::Load(dir, be_.get(), DType::kF32);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->has_text() && (*m)->has_vision());
  EXPECT_EQ((*m)->projection_dim(), doc_["projection_dim"].get_int64().value());
  auto px = Pixels(dir, (*m)->pixels_per_image());
  ASSERT_FALSE(px.empty());
  CheckImages(**m, px);
  CheckTexts(**m);
  int same = 0;
  for (bool b : identical_) same += b;
  std::printf("%s: %d of %zu images with pixel values identical to transformers'\n",
              GetParam().c_str(), same, identical_.size());
  // logits_per_image = exp(logit_scale) * cos(image, text).
  EXPECT_NEAR((*m)->logit_scale(), doc_["logit_scale"].get_double().value(), 1e-6);
  const int P = (*m)->projection_dim();
  const double scale = std::exp(static_cast<double>((*m)->logit_scale()));
  auto norm = [&](const float* v) {
    double s = 0;
    for (int i = 0; i < P; ++i) s += double(v[i]) * v[i];
    return std::sqrt(s);
  };
  int i = 0;
  for (auto row : doc_["logits_per_image"].get_array()) {
    int j = 0;
    for (auto want : row.get_array()) {
      const float* a = image_embeds_.data() + i * P;
      const float* b = text_embeds_.data() + j * P;
      double dot = 0;
      for (int k = 0; k < P; ++k) dot += double(a[k]) * b[k];
      const double tol = (identical_.at(i) ? tol_ : kImageTol) * scale;
      EXPECT_NEAR(scale * dot / (norm(a) * norm(b)), want.get_double().value(), tol)
          << "logits[" << i << "][" << j << "]";
      ++j;
    }
    ++i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ClipGolden,
                         ::testing::Values("clip_quickgelu", "clip_gelu_odd"));

class ClipTowers : public ClipGolden {};

// The towers saved alone (same weights as the full model) give the same embeddings; each
// refuses the other modality.
TEST_P(ClipTowers, TowersAloneMatch) {
  const std::string base = kClip + "/" + GetParam();
  auto vis = ClipModel::Load(base + "/vision_model", be_.get(), DType::kF32);
  ASSERT_TRUE(vis.ok()) << vis.status().ToString();
  EXPECT_TRUE((*vis)->has_vision());
  EXPECT_FALSE((*vis)->has_text());
  auto px = Pixels(base + "/vision_model", (*vis)->pixels_per_image());
  ASSERT_FALSE(px.empty());
  CheckImages(**vis, px);
  EXPECT_FALSE((*vis)->EmbedTexts({{1, 2}}).ok());

  auto txt = ClipModel::Load(base + "/text_model", be_.get(), DType::kF32);
  ASSERT_TRUE(txt.ok()) << txt.status().ToString();
  EXPECT_TRUE((*txt)->has_text());
  EXPECT_FALSE((*txt)->has_vision());
  CheckTexts(**txt);
  EXPECT_FALSE((*txt)->EmbedImages(px.data(), 1).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ClipTowers, ::testing::Values("clip_quickgelu"));

// Bad inputs are refused naming the problem; nothing crashes.
TEST(ClipInputs, RefusedNamingTheProblem) {
  auto be = MakeBackend();
  ASSERT_NE(be, nullptr);
  auto m = ClipModel::Load(kClip + "/clip_quickgelu/model", be.get(), DType::kF32);
  ASSERT_TRUE(m.ok());
  const auto& tc = (*m)->text_config();
  auto empty = (*m)->EmbedTexts({{}});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no tokens"), std::string::npos);
  auto oov = (*m)->EmbedTexts({{1, tc.vocab_size}});
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("outside the vocabulary"), std::string::npos);
  auto too_long = (*m)->EmbedTexts({std::vector<int32_t>(tc.max_position_embeddings + 1, 3)});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("at most"), std::string::npos);
  auto none = (*m)->EmbedTexts({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto not_clip =
      ClipModel::Load(std::string(SLUICE_FIXTURES_DIR) + "/clip/../images", be.get(), DType::kF32);
  EXPECT_FALSE(not_clip.ok());
}

}  // namespace
}  // namespace sluice
