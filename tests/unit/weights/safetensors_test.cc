// safetensors reader: well-formed files (single, sharded, each dtype) and every way a
// file can be broken, each with an error naming the file and tensor.
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace sluice {
namespace {

namespace fs = std::filesystem;

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  size_t bytes;
};

// Writes a safetensors file; `corrupt` lets a test tamper with header or data.
void WriteSafetensors(const fs::path& path, const std::vector<TensorSpec>& specs,
                      const std::string& header_override = "", size_t truncate_data = 0) {
  std::string header = "{";
  size_t off = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    header += (i ? "," : "") + std::string("\"") + s.name + "\":{\"dtype\":\"" + s.dtype +
              "\",\"shape\":[";
    for (size_t d = 0; d < s.shape.size(); ++d)
      header += (d ? "," : "") + std::to_string(s.shape[d]);
    header +=
        "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + s.bytes) + "]}";
    off += s.bytes;
  }
  header += ",\"__metadata__\":{\"format\":\"pt\"}}";
  if (!header_override.empty()) header = header_override;
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  std::string data(off - std::min(off, truncate_data), '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  f << data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsSingleFileAllDTypes) {
  WriteSafetensors(dir_ / "model.safetensors", {{"a", "F32", {2, 3}, 24},
                                                {"b", "BF16", {4}, 8},
                                                {"c", "F16", {1, 2, 2}, 8},
                                                {"d", "I64", {1}, 8}});
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->Names().size(), 4u);
  auto a = s->Get("a", {2, 3});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->numel(), 6);
  EXPECT_EQ(s->Get("b")->dtype, DType::kBF16);
  EXPECT_EQ(s->Get("c")->dtype, DType::kF16);
  EXPECT_EQ(s->TotalParameters(), 6 + 4 + 4 + 1);
  EXPECT_EQ(s->DominantDType(), DType::kF32);
  // data pointers are laid out by data_offsets
  EXPECT_EQ(static_cast<const char*>(s->Get("b")->data) - static_cast<const char*>(a->data), 24);
}

TEST_F(SafetensorsTest, MissingAndMisShapedTensorsNameTheTensor) {
  WriteSafetensors(dir_ / "model.safetensors", {{"layer.weight", "F32", {2, 3}, 24}});
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_TRUE(s.ok());
  auto missing = s->Get("layer.bias");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("layer.bias"), std::string::npos);
  auto wrong = s->Get("layer.weight", {3, 2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("[2, 3]"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("[3, 2]"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedFileIsRefused) {
  WriteSafetensors(dir_ / "model.safetensors", {{"w", "F32", {4, 4}, 64}}, "", 10);
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'w'"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("model.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, TinyOrGarbageFilesAreRefused) {
  { std::ofstream(dir_ / "model.safetensors") << "abc"; }
  EXPECT_FALSE(WeightStore::OpenDirectory(dir_.string()).ok());
  {
    std::ofstream f(dir_ / "model.safetensors", std::ios::binary);
    uint64_t n = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("header length"), std::string::npos);
  WriteSafetensors(dir_ / "model.safetensors", {}, "{not json");
  EXPECT_FALSE(WeightStore::OpenDirectory(dir_.string()).ok());
}

TEST_F(SafetensorsTest, InconsistentShapeAndOffsetsAreRefused) {
  WriteSafetensors(dir_ / "model.safetensors", {{"w", "F32", {4, 4}, 60}});
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("needs 64 bytes"), std::string::npos) << s.status().message();
}

TEST_F(SafetensorsTest, UnknownDTypeIsRefused) {
  WriteSafetensors(dir_ / "model.safetensors", {{"w", "F8_E4M3", {4}, 4}});
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(s.status().message().find("F8_E4M3"), std::string::npos);
}

TEST_F(SafetensorsTest, ShardedIndex) {
  WriteSafetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {2}, 8}});
  WriteSafetensors(dir_ / "model-00002-of-00002.safetensors", {{"b", "BF16", {2}, 4}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      << R"("b":"model-00002-of-00002.safetensors"}})";
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->Has("a"));
  EXPECT_TRUE(s->Has("b"));
}

TEST_F(SafetensorsTest, ShardedIndexWithMissingShardOrTensor) {
  WriteSafetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {2}, 8}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"gone.safetensors"}})";
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gone.safetensors"), std::string::npos);
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})";
  s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'c'"), std::string::npos);
}

TEST_F(SafetensorsTest, PickleCheckpointsAreRefusedWithAdvice) {
  std::ofstream(dir_ / "pytorch_model.bin") << "not really a pickle";
  auto s = WeightStore::OpenDirectory(dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(s.status().message().find("safetensors"), std::string::npos);
  EXPECT_NE(s.status().message().find("pytorch_model.bin"), std::string::npos);
}

TEST_F(SafetensorsTest, MissingDirectory) {
  auto s = WeightStore::OpenDirectory((dir_ / "nope").string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice
