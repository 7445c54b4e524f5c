// The CLIP embedding path of server/clip_embedder.h on the golden fixture
// (tests/fixtures/clip/clip_quickgelu): images of concurrent callers gathered into one vision
// forward give what each gets alone; the queue of pre-processed images is bounded (a caller
// waits for room); duplicates across concurrent callers are computed once and identical.
#include "server/clip_embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace sluice::server {
namespace {

const std::string kModel = std::string(SLUICE_FIXTURES_DIR) + "/clip/clip_quickgelu/model";
const std::string kImages = std::string(SLUICE_FIXTURES_DIR) + "/images";
const std::vector<std::string> kFiles = {"jpeg420.jpg",     "jpeg444.jpg",     "png_rgb.png",
                                         "png_palette.png", "webp_lossy.webp", "exif6_jpg.jpg"};

std::unique_ptr<ClipEmbedder> Make(int batch, int queued, size_t cache_bytes = 0) {
  ClipEmbedderOptions o;
  o.dir = kModel;
  o.fetch.local_root = kImages;
  o.cache_bytes = cache_bytes;
  o.decode_threads = 2;
  o.max_image_batch = batch;
  o.max_queued_images = queued;
  auto e = ClipEmbedder::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<ClipItem> Images(const std::vector<std::string>& files) {
  std::vector<ClipItem> items;
  for (size_t i = 0; i < files.size(); ++i) {
    ClipItem it;
    it.image = true;
    it.text = kImages + "/" + files[i];
    it.path = "input[" + std::to_string(i) + "]";
    items.push_back(it);
  }
  return items;
}

// A metric's value (-1 when absent).
double MetricValue(const ClipEmbedder& e, const std::string& name) {
  const std::string m = e.RenderMetrics("");
  const size_t at = m.find("\n" + name + "{} ");
  if (at == std::string::npos) return -1;
  return std::stod(m.substr(at + name.size() + 4));
}
uint64_t Metric(const ClipEmbedder& e, const std::string& name) {
  const double v = MetricValue(e, name);
  return v < 0 ? UINT64_MAX : static_cast<uint64_t>(v);
}

// Each call's Embed on a thread of its own, the engine held until `images` images and `texts`
// text jobs are queued, so that the calls meet in the queue; each call's status and output.
std::vector<std::pair<Status, std::vector<float>>> EmbedTogether(
    ClipEmbedder& e, const std::vector<std::vector<ClipItem>>& calls, int64_t images, int texts) {
  std::vector<std::pair<Status, std::vector<float>>> got(calls.size());
  e.HoldForTest(true);
  std::vector<std::thread> threads;
  for (size_t c = 0; c < calls.size(); ++c) {
    threads.emplace_back([&, c] {
      int64_t tokens = 0;
      got[c].first = e.Embed(calls[c], &got[c].second, &tokens);
    });
  }
  e.WaitForTest(images, 0, texts);
  e.HoldForTest(false);
  for (auto& t : threads) t.join();
  return got;
}

TEST(ClipEmbedder, ConcurrentCallersShareOneForwardAndGetTheirAloneResults) {
  // Alone: each caller's images in their own forward.
  auto ref = Make(64, 0);
  ASSERT_TRUE(ref);
  const std::vector<std::vector<std::string>> calls = {
      {kFiles[0], kFiles[1]}, {kFiles[2], kFiles[3], kFiles[4]}, {kFiles[5]}};
  std::vector<std::vector<float>> alone(calls.size());
  for (size_t c = 0; c < calls.size(); ++c) {
    int64_t tokens = 0;
    ASSERT_TRUE(ref->Embed(Images(calls[c]), &alone[c], &tokens).ok());
  }
  // Together: the engine is held until all six images are queued, then runs them as one.
  auto e = Make(64, 0);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->WarmUp().ok());
  std::vector<std::vector<ClipItem>> items;
  for (const auto& c : calls) items.push_back(Images(c));
  const auto got = EmbedTogether(*e, items, 6, 0);
  const int P = e->model().projection_dim();
  for (size_t c = 0; c < calls.size(); ++c) {
    ASSERT_TRUE(got[c].first.ok()) << got[c].first.message();
    ASSERT_EQ(got[c].second.size(), calls[c].size() * P);
    for (size_t i = 0; i < got[c].second.size(); ++i) {
      EXPECT_NEAR(got[c].second[i], alone[c][i], 1e-5);
    }
  }
  EXPECT_EQ(Metric(*e, "sluice_image_forwards_total"), 1u);
  EXPECT_EQ(Metric(*e, "sluice_image_forwards_coalesced_total"), 1u);
  EXPECT_EQ(Metric(*e, "sluice_images_embedded_total"), 6u);
  // The forward's time is counted (seconds, a float: present and positive).
  EXPECT_GT(MetricValue(*e, "sluice_image_forward_seconds_total"), 0.0);
}

std::vector<ClipItem> Texts(const std::vector<std::vector<int32_t>>& ids) {
  std::vector<ClipItem> items;
  for (size_t i = 0; i < ids.size(); ++i) {
    ClipItem it;
    it.has_ids = true;
    it.ids = ids[i];
    it.path = "input[" + std::to_string(i) + "]";
    items.push_back(it);
  }
  return items;
}

// The texts of concurrent callers (queued between their images) run as one forward of the
// text tower, each caller getting what it gets alone; a caller whose token id is outside the
// vocabulary fails alone, naming its own text, while the others' texts still run.
TEST(ClipEmbedder, ConcurrentTextsShareOneForwardAndABadOneFailsAlone) {
  const std::vector<std::vector<std::vector<int32_t>>> calls = {
      {{1, 120, 2}},  // the fixture: vocabulary 300, eos 2
      {{1, 125, 239, 2}, {1, 2}},
      {{1, 7, 8, 9, 2}}};
  auto ref = Make(64, 0);
  ASSERT_TRUE(ref);
  std::vector<std::vector<float>> alone(calls.size());
  for (size_t c = 0; c < calls.size(); ++c) {
    int64_t tokens = 0;
    ASSERT_TRUE(ref->Embed(Texts(calls[c]), &alone[c], &tokens).ok());
  }
  for (int bad = -1; bad < 1; ++bad) {  // -1: every text valid; 0: caller 0 out of vocabulary
    auto e = Make(64, 0);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->WarmUp().ok());
    std::vector<std::vector<ClipItem>> items;
    for (const auto& c : calls) items.push_back(Texts(c));
    if (bad >= 0) items[static_cast<size_t>(bad)][0].ids[1] = 1 << 30;
    const auto got = EmbedTogether(*e, items, 0, static_cast<int>(calls.size()));
    const int P = e->model().projection_dim();
    for (size_t c = 0; c < calls.size(); ++c) {
      const Status& st = got[c].first;
      if (static_cast<int>(c) == bad) {
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("text 0"), std::string::npos) << st.message();
        continue;
      }
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(got[c].second.size(), calls[c].size() * P);
      for (size_t i = 0; i < got[c].second.size(); ++i) {
        EXPECT_NEAR(got[c].second[i], alone[c][i], 1e-5);
      }
    }
    // One forward for the three callers; with a bad one, that forward plus one per caller.
    EXPECT_EQ(Metric(*e, "sluice_clip_text_forwards_total"), bad < 0 ? 1u : 4u);
  }
}

TEST(ClipEmbedder, BatchesAreCappedAndTheQueueIsBounded) {
  // Batches of at most 2 images, at most 3 queued: a caller of 3 images queues runs of 2 + 1;
  // a second caller waits for room.
  auto e = Make(2, 3);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->WarmUp().ok());
  e->HoldForTest(true);
  std::vector<float> a, b;
  Status sa, sb;
  std::thread ta([&] {
    int64_t t = 0;
    sa = e->Embed(Images({kFiles[0], kFiles[1], kFiles[2]}), &a, &t);
  });
  e->WaitForTest(3, 0);
  std::thread tb([&] {
    int64_t t = 0;
    sb = e->Embed(Images({kFiles[3], kFiles[4]}), &b, &t);
  });
  e->WaitForTest(3, 1);  // b waits: 3 queued + 2 would exceed the bound
  e->HoldForTest(false);
  ta.join();
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa.message();
  ASSERT_TRUE(sb.ok()) << sb.message();
  // 5 images in batches of at most 2: at least 3 forwards, every image once.
  EXPECT_GE(Metric(*e, "sluice_image_forwards_total"), 3u);
  EXPECT_EQ(Metric(*e, "sluice_images_embedded_total"), 5u);
}

TEST(ClipEmbedder, DuplicatesAcrossConcurrentCallersAreComputedOnceAndIdentical) {
  auto e = Make(64, 0);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->WarmUp().ok());
  e->HoldForTest(true);
  const int kCallers = 4;
  std::vector<std::vector<float>> got(kCallers);
  std::vector<std::thread> threads;
  // Each caller: the same image three times, and one image of its own.
  for (int c = 0; c < kCallers; ++c) {
    threads.emplace_back([&, c] {
      int64_t t = 0;
      EXPECT_TRUE(
          e->Embed(Images({kFiles[0], kFiles[1 + c], kFiles[0], kFiles[0]}), &got[c], &t).ok());
    });
  }
  // kFiles[0] once (by the caller that claimed it) + one own image each.
  e->WaitForTest(1 + kCallers, 0);
  e->HoldForTest(false);
  for (auto& t : threads) t.join();
  const int P = e->model().projection_dim();
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_EQ(got[c].size(), 4u * P);
    for (int k : {2, 3}) {
      EXPECT_TRUE(std::equal(got[c].begin(), got[c].begin() + P, got[c].begin() + k * P));
    }
    EXPECT_TRUE(std::equal(got[c].begin(), got[c].begin() + P, got[0].begin()));
  }
  EXPECT_EQ(Metric(*e, "sluice_images_embedded_total"), 1u + kCallers);
}

TEST(ClipEmbedder, ErrorsNameTheInput) {
  auto e = Make(4, 0);
  ASSERT_TRUE(e);
  std::vector<float> out;
  int64_t t = 0;
  auto items = Images({kFiles[0], "cases.json"});
  Status s = e->Embed(items, &out, &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("input[1].image"), std::string::npos) << s.message();
  // The embedder keeps serving after a failed call.
  s = e->Embed(Images({kFiles[0]}), &out, &t);
  EXPECT_TRUE(s.ok()) << s.message();
}

// A JPEG fixture's bytes with a comment segment naming `i` after SOI: a distinct image to the
// content hash (no deduplication), the same pixels to the decoder.
std::string DistinctJpeg(int i) {
  std::ifstream f(kImages + "/" + kFiles[0], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string jpg = ss.str();
  const std::string text = "copy " + std::to_string(i);
  std::string seg = "\xFF\xFE";
  seg += static_cast<char>((text.size() + 2) >> 8);
  seg += static_cast<char>((text.size() + 2) & 255);
  seg += text;
  return jpg.substr(0, 2) + seg + jpg.substr(2);
}

std::string DataUri(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out = "data:image/jpeg;base64,";
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

ClipItem Source(const std::string& src, size_t i) {
  ClipItem it;
  it.image = true;
  it.text = src;
  it.path = "input[" + std::to_string(i) + "]";
  return it;
}

// Many distinct images of one call on 8 decode threads at once, repeatedly: every image gets
// its row (the decode threads mark their images done side by side), all equal to the one
// image alone. 90-96 images of this fixture are over 1 MiB of pixel values, so the rounds also
// run on the job buffers that earlier rounds gave back (TakePixels / KeepPixels).
TEST(ClipEmbedder, ManyImagesOnManyDecodeThreadsAllArrive) {
  ClipEmbedderOptions o;
  o.dir = kModel;
  o.fetch.local_root = kImages;
  o.cache_bytes = 0;
  o.decode_threads = 8;
  o.max_image_batch = 128;
  auto made = ClipEmbedder::Load(o);
  ASSERT_TRUE(made.ok()) << made.status().message();
  auto& e = *made;
  std::vector<float> alone;
  int64_t t = 0;
  ASSERT_TRUE(e->Embed({Source(DataUri(DistinctJpeg(0)), 0)}, &alone, &t).ok());
  const size_t P = alone.size();
  ASSERT_GE(96 * e->model().pixels_per_image() * sizeof(float), size_t{1} << 20);
  int next = 1;
  for (int round = 0; round < 10; ++round) {
    const int n = round % 2 == 0 ? 96 : 90;
    std::vector<ClipItem> items;
    for (int i = 0; i < n; ++i) items.push_back(Source(DataUri(DistinctJpeg(next++)), i));
    std::vector<float> out;
    const Status s = e->Embed(items, &out, &t);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(out.size(), n * P);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + i * P))
          << "round " << round << " image " << i;
    }
  }
}

// An image that fails to decode among others leaves no row in the forward: the others' rows
// stay theirs (each is cached under its own hash and served later as computed alone).
TEST(ClipEmbedder, AFailedImageLeavesTheOthersRowsInPlace) {
  auto e = Make(64, 0, 1 << 20);
  ASSERT_TRUE(e);
  std::vector<std::vector<float>> alone(3);
  {
    auto ref = Make(64, 0);
    ASSERT_TRUE(ref);
    int64_t t = 0;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(ref->Embed(Images({kFiles[2 + i]}), &alone[i], &t).ok());
    }
  }
  std::vector<float> out;
  int64_t t = 0;
  std::vector<ClipItem> items = Images({kFiles[2], kFiles[3], kFiles[4]});
  items.insert(items.begin() + 1, Source(DataUri("not an image at all"), 1));
  const Status s = e->Embed(items, &out, &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("input[1].image"), std::string::npos) << s.message();
  EXPECT_EQ(Metric(*e, "sluice_images_embedded_total"), 3u);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> got;
    ASSERT_TRUE(e->Embed(Images({kFiles[2 + i]}), &got, &t).ok());
    ASSERT_EQ(got.size(), alone[i].size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], alone[i][k], 1e-5) << i;
  }
  EXPECT_EQ(Metric(*e, "sluice_images_embedded_total"), 3u);  // all three from the cache
}

}  // namespace
}  // namespace sluice::server
