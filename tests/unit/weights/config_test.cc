// config.json (transformers 4.x and 5.x spellings), sentence-transformers modules
// (2.x-6.x type names) and sluice.json.
#include "weights/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/model.h"
#include "models/registry.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TEST(ModelConfig, Transformers4Spelling) {
  auto c = ParseModelConfig(R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3",
    "torch_dtype":"bfloat16","hidden_size":1024,"num_attention_heads":16,
    "num_key_value_heads":8,"head_dim":128,"rope_theta":1000000,"vocab_size":151669,
    "num_hidden_layers":28,"intermediate_size":3072,"tie_word_embeddings":true,
    "rope_scaling":null,"sliding_window":null})",
                            "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ModelConfig, Transformers5Spelling) {
  auto c = ParseModelConfig(R"({"architectures":["Qwen3Model"],"dtype":"float32",
    "hidden_size":64,"num_attention_heads":4,"vocab_size":10,"num_hidden_layers":1,
    "intermediate_size":8,"rope_parameters":{"rope_theta":5000.0,"rope_type":"default"}})",
                            "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(c->rope_theta, 5000.0);
  EXPECT_EQ(c->head_dim, 16);            // hidden / heads when head_dim is missing
  EXPECT_EQ(c->num_key_value_heads, 4);  // defaults to heads
}

TEST(ModelConfig, Labels) {
  auto c = ParseModelConfig(
      R"({"architectures":["BertForSequenceClassification"],"id2label":{"1":"pos","0":"neg"},
          "problem_type":"single_label_classification"})",
      "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_labels, 2);
  EXPECT_EQ(c->id2label, (std::vector<std::string>{"neg", "pos"}));
  auto gap = ParseModelConfig(R"({"id2label":{"0":"a","2":"c"}})", "config.json");
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("index 1"), std::string::npos);
}

TEST(ModelConfig, BadInputsNameTheField) {
  auto c = ParseModelConfig(R"({"hidden_size":"big"})", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("hidden_size"), std::string::npos);
  EXPECT_NE(c.status().message().find("x/config.json"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig("{", "config.json").ok());
  auto d = ParseModelConfig(R"({"torch_dtype":"float8_e4m3fn"})", "config.json");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnsupported);
}

TEST(ModelConfig, UnknownArchitectureIsRefused) {
  auto c = ParseModelConfig(R"({"architectures":["LlamaForTokenClassification"]})", "config.json");
  ASSERT_TRUE(c.ok());
  auto a = LookupArchitecture(*c);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("LlamaForTokenClassification"), std::string::npos);
  EXPECT_NE(a.status().message().find("BertModel"), std::string::npos);  // lists supported
}

TEST(ModelConfig, CrossEncoderActivation) {
  auto c = ParseModelConfig(
      R"({"sentence_transformers":{"activation_fn":"torch.nn.modules.linear.Identity"}})", "c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->classifier_activation, "torch.nn.modules.linear.Identity");
}

TEST(ModelConfig, Matryoshka) {
  auto plain = ParseModelConfig(R"({"hidden_size": 8})", "c");
  ASSERT_TRUE(plain.ok());
  const SluiceOverrides none;
  EXPECT_FALSE(ResolveMatryoshka(*plain, none).enabled);
  auto flag = ParseModelConfig(R"({"is_matryoshka": true})", "c");
  ASSERT_TRUE(flag.ok());
  Matryoshka m = ResolveMatryoshka(*flag, none);
  EXPECT_TRUE(m.enabled);
  EXPECT_TRUE(m.dimensions.empty());
  auto list = ParseModelConfig(R"({"matryoshka_dimensions": [64, 128]})", "c");
  ASSERT_TRUE(list.ok());
  m = ResolveMatryoshka(*list, none);
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.dimensions, (std::vector<int>{64, 128}));
  auto bad = ParseModelConfig(R"({"matryoshka_dimensions": [0]})", "c");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("matryoshka_dimensions"), std::string::npos);
  // sluice.json wins over config.json.
  SluiceOverrides on;
  on.matryoshka_dimensions = {32};
  EXPECT_EQ(ResolveMatryoshka(*plain, on).dimensions, std::vector<int>{32});
  SluiceOverrides off;
  off.is_matryoshka = false;
  EXPECT_FALSE(ResolveMatryoshka(*list, off).enabled);
}

TEST(ModelConfig, MatryoshkaDimensionsRule) {
  Matryoshka no;
  EXPECT_NE(MatryoshkaDimensionsError(no, 8, 16).find("Matryoshka"), std::string::npos);
  Matryoshka any{true, {}};
  EXPECT_EQ(MatryoshkaDimensionsError(any, 8, 16), "");
  EXPECT_EQ(MatryoshkaDimensionsError(any, 16, 16), "");
  EXPECT_NE(MatryoshkaDimensionsError(any, 17, 16), "");
  EXPECT_NE(MatryoshkaDimensionsError(any, 0, 16), "");
  Matryoshka listed{true, {4, 8}};
  EXPECT_EQ(MatryoshkaDimensionsError(listed, 8, 16), "");
  EXPECT_NE(MatryoshkaDimensionsError(listed, 6, 16).find("[4, 8]"), std::string::npos);
}

class DirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("sluice_cfg_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text;
  }
  fs::path dir_;
};

TEST_F(DirTest, SentenceTransformersV2Layout) {
  Write("modules.json",
        R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
    {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
    {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])");
  Write("1_Pooling/config.json", R"({"word_embedding_dimension":384,"pooling_mode_cls_token":false,
    "pooling_mode_mean_tokens":true,"pooling_mode_max_tokens":false})");
  Write("sentence_bert_config.json", R"({"max_seq_length":256,"do_lower_case":false})");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->present);
  ASSERT_TRUE(st->pooling.has_value());
  EXPECT_TRUE(st->pooling->mean);
  EXPECT_TRUE(st->normalize);
  EXPECT_EQ(st->max_seq_length, 256);
}

TEST_F(DirTest, SentenceTransformersV6ModuleNames) {
  Write("modules.json",
        R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.base.models.Transformer"},
    {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.sentence_transformer.models.Pooling"},
    {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.sentence_transformer.models.Dense"}])");
  Write("1_Pooling/config.json", R"({"pooling_mode_lasttoken":true})");
  Write("2_Dense/config.json", R"({"in_features":8,"out_features":4,"bias":false,
    "activation_function":"torch.nn.modules.linear.Identity"})");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->pooling->last_token);
  ASSERT_EQ(st->dense.size(), 1u);
  EXPECT_EQ(st->dense[0].out_features, 4);
  EXPECT_FALSE(st->dense[0].bias);
}

TEST_F(DirTest, UnknownModuleTypeIsRefused) {
  Write("modules.json", R"([{"idx":0,"path":"","type":"sentence_transformers.models.LSTM"}])");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("LSTM"), std::string::npos);
}

TEST_F(DirTest, SluiceJson) {
  Write("sluice.json", R"({"calibration":{"mean":[0.5],"std":[2]},"labels":["a"],
    "thresholds":0.3,"instruction":"Judge","yes_token_id":5})");
  auto o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->calibration_mean, std::vector<float>{0.5f});
  EXPECT_EQ(o->calibration_std, std::vector<float>{2.f});
  EXPECT_EQ(o->thresholds, std::vector<float>{0.3f});
  EXPECT_EQ(*o->instruction, "Judge");
  EXPECT_EQ(*o->yes_token_id, 5);
  Write("sluice.json", R"({"matryoshka_dimensions": [8, 16], "is_matryoshka": true})");
  auto mat = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(mat.ok()) << mat.status().ToString();
  EXPECT_EQ(mat->matryoshka_dimensions, (std::vector<int>{8, 16}));
  EXPECT_TRUE(mat->is_matryoshka.value_or(false));
  Write("sluice.json", R"({"calibraton":{}})");
  auto bad = LoadSluiceOverrides(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("calibraton"), std::string::npos);
  Write("sluice.json", R"({"calibration":{"mean":[0],"std":[0]}})");
  EXPECT_FALSE(LoadSluiceOverrides(dir_.string()).ok());
}

TEST_F(DirTest, AbsaSentimentModelIsResolvedAgainstTheModelDirectory) {
  Write("sluice.json", R"({"absa": {"sentiment_model": "sent", "sentiments": {"POS": "p"}}})");
  auto o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(o->absa.has_value());
  EXPECT_EQ(o->absa->sentiment_model, (dir_ / "sent").string());
  Write("sluice.json", R"({"absa": {"sentiment_model": "/abs/sent"}})");
  o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->absa->sentiment_model, "/abs/sent");
  Write("sluice.json", R"({"absa": {}})");
  o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->absa->sentiment_model, "");
  for (const char* bad :
       {R"({"absa": {"sentiment_model": 3}})", R"({"absa": {"sentiment_model": ""}})"}) {
    Write("sluice.json", bad);
    auto b = LoadSluiceOverrides(dir_.string());
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("absa.sentiment_model"), std::string::npos);
  }
}

TEST_F(DirTest, ColbertSkiplistFromPylateConfigAndSluiceJson) {
  // Neither file names it: PyLate's default, Python's string.punctuation, a word per character.
  SluiceOverrides none;
  SentenceTransformersConfig empty;
  const std::vector<std::string> words = ResolveSkiplistWords(empty, none);
  std::string joined;
  for (const std::string& w : words) {
    EXPECT_EQ(w.size(), 1u);
    joined += w;
  }
  EXPECT_EQ(joined, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~");
  // PyLate saves its skiplist_words in config_sentence_transformers.json.
  Write("config_sentence_transformers.json",
        R"({"query_length": 32, "skiplist_words": ["!", "::"]})");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(ResolveSkiplistWords(*st, none), (std::vector<std::string>{"!", "::"}));
  // sluice.json wins; [] turns it off.
  Write("sluice.json", R"({"late_interaction": true, "skiplist_words": []})");
  auto o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(ResolveSkiplistWords(*st, *o).empty());
  Write("sluice.json", R"({"skiplist_words": ["?"]})");
  o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(ResolveSkiplistWords(*st, *o), std::vector<std::string>{"?"});
  // Not a list of strings: refused, naming the field.
  Write("sluice.json", R"({"skiplist_words": "!?"})");
  auto bad = LoadSluiceOverrides(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("skiplist_words"), std::string::npos);
  Write("config_sentence_transformers.json", R"({"skiplist_words": [1]})");
  auto bad_st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_FALSE(bad_st.ok());
  EXPECT_NE(bad_st.status().message().find("skiplist_words"), std::string::npos);
}

TEST_F(DirTest, ColbertPrefixesAndDocumentLengthFromPylateConfig) {
  SluiceOverrides none;
  SentenceTransformersConfig empty;
  auto t0 = ResolveLateInteractionTexts(empty, none);
  ASSERT_TRUE(t0.ok());
  EXPECT_EQ(t0->query_prefix, "");
  EXPECT_EQ(t0->document_length, 0);
  // PyLate saves its prefixes and document_length; sluice.json's win, "" and 0 included.
  Write("config_sentence_transformers.json",
        R"({"query_prefix": "[Q] ", "document_prefix": "[D] ", "document_length": 180})");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto t = ResolveLateInteractionTexts(*st, none);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->query_prefix, "[Q] ");
  EXPECT_EQ(t->document_prefix, "[D] ");
  EXPECT_EQ(t->document_length, 180);
  Write("sluice.json", R"({"late_interaction": true, "query_prefix": "", "document_length": 0})");
  auto o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  t = ResolveLateInteractionTexts(*st, *o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->query_prefix, "");
  EXPECT_EQ(t->document_prefix, "[D] ");
  EXPECT_EQ(t->document_length, 0);
  Write("sluice.json", R"({"document_length": -3})");
  o = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FALSE(ResolveLateInteractionTexts(*st, *o).ok());
}

TEST_F(DirTest, ColbertQueryExpansionFromPylateConfigAndSluiceJson) {
  // PyLate's config_sentence_transformers.json: expansion on with query_length.
  Write("config_sentence_transformers.json",
        R"({"__version__": {"pylate": "1.1"}, "prompts": {}, "query_length": 24,
            "attend_to_expansion_tokens": true})");
  auto st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->query_length, 24);
  EXPECT_TRUE(st->do_query_expansion);
  SluiceOverrides none;
  auto q = ResolveQueryExpansion(*st, none, true);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->length, 24);
  EXPECT_TRUE(q->attend);
  // Not a late-interaction model: PyLate's settings do nothing; sluice.json's are an error.
  EXPECT_EQ(ResolveQueryExpansion(*st, none, false)->length, 0);
  SluiceOverrides o;
  o.query_length = 16;
  EXPECT_FALSE(ResolveQueryExpansion(*st, o, false).ok());
  EXPECT_EQ(ResolveQueryExpansion(*st, o, true)->length, 16);  // sluice.json wins
  o.query_length = 0;
  EXPECT_EQ(ResolveQueryExpansion(*st, o, true)->length, 0);  // turned off
  o.query_length = -1;
  EXPECT_FALSE(ResolveQueryExpansion(*st, o, true).ok());
  // Expansion tokens the others do not attend (PyLate's default): served so.
  SluiceOverrides unattended;
  unattended.attend_to_expansion_tokens = false;
  auto u = ResolveQueryExpansion(*st, unattended, true);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->length, 24);
  EXPECT_FALSE(u->attend);
  // PyLate's config without attend_to_expansion_tokens: its default, false.
  Write("config_sentence_transformers.json", R"({"query_length": 32})");
  auto st2 = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st2.ok()) << st2.status().ToString();
  auto d = ResolveQueryExpansion(*st2, none, true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->length, 32);
  EXPECT_FALSE(d->attend);
  // do_query_expansion false: no augmentation.
  Write("config_sentence_transformers.json",
        R"({"query_length": 32, "do_query_expansion": false})");
  st = LoadSentenceTransformersConfig(dir_.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(ResolveQueryExpansion(*st, none, true)->length, 0);
  // sluice.json's fields.
  Write("sluice.json", R"({"late_interaction": true, "query_length": 20,
                           "attend_to_expansion_tokens": true})");
  auto so = LoadSluiceOverrides(dir_.string());
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_EQ(so->query_length, 20);
  EXPECT_EQ(so->attend_to_expansion_tokens, true);
  Write("sluice.json", R"({"attend_to_expansion_tokens": 1})");
  EXPECT_FALSE(LoadSluiceOverrides(dir_.string()).ok());
}

TEST_F(DirTest, NoConfig) {
  auto c = LoadModelConfig(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice
