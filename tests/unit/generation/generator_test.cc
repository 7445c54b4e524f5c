// The generation engine's request handling: stop tokens and strings (across token
// boundaries, with min_tokens and include_stop_str_in_output), max_tokens, logit_bias,
// n > 1 sharing the prompt's blocks, streaming deliveries, cancellation freeing blocks at
// once, and every admission error naming its field or numbers.
#include "gen_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using testing::Greedy;
using testing::Request;

const std::string Qwen3() { return testing::kGenFixtures + "/qwen3/model"; }

std::vector<int32_t> Prompt() { return {4770, 12, 99, 1500, 33}; }

// The greedy continuation of Prompt(), its text, and the tokenizer.
struct Reference {
  std::vector<int32_t> tokens;
  std::string text;
};
Reference GreedyReference(Generator& g, int n = 30) {
  auto r = Request(Prompt(), Greedy(n));
  testing::RunAll(g, {r});
  return {r->outputs[0].token_ids, r->outputs[0].text};
}

TEST(Generator, TextIsTheDetokenisedOutput) {
  auto g = testing::LoadGenerator(Qwen3());
  ASSERT_NE(g, nullptr);
  const Reference ref = GreedyReference(*g);
  auto text = g->bundle().tokenizer->Decode(ref.tokens, true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(ref.text, *text);
}

TEST(Generator, StopStringAcrossTokenBoundaries) {
  auto g = testing::LoadGenerator(Qwen3());
  ASSERT_NE(g, nullptr);
  const Reference ref = GreedyReference(*g);
  // A stop string made of the end of token 9's text and the start of token 10's, so it is
  // only complete once token 10 is decoded.
  const Tokenizer& tok = *g->bundle().tokenizer;
  const std::string upto9 =
      *tok.Decode(std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 10), true);
  const std::string upto10 =
      *tok.Decode(std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 11), true);
  ASSERT_GT(upto10.size(), upto9.size());
  ASSERT_GE(upto9.size(), 2u);
  const std::string stop = upto9.substr(upto9.size() - 2) + upto10.substr(upto9.size(), 1);
  ASSERT_EQ(ref.text.find(stop), upto9.size() - 2) << "stop string must first occur there";
  SamplingParams p = Greedy(30);
  p.stop = {"never appears here", stop};
  auto r = Request(Prompt(), p);
  SamplingParams pi = p;
  pi.include_stop_str_in_output = true;
  auto ri = Request(Prompt(), pi);
  testing::RunAll(*g, {r, ri});
  const CompletionOutput& o = r->outputs[0];
  EXPECT_EQ(o.finish_reason, "stop");
  ASSERT_TRUE(o.stop_string.has_value());
  EXPECT_EQ(*o.stop_string, stop);
  // Generation stops at the token whose text completes the stop string (the streaming
  // decoder may release a token's text one token later, while a character is incomplete).
  ASSERT_GE(o.token_ids.size(), 11u);
  ASSERT_LE(o.token_ids.size(), 12u);
  EXPECT_EQ(o.token_ids,
            std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + o.token_ids.size()));
  EXPECT_EQ(o.text, upto9.substr(0, upto9.size() - 2));
  EXPECT_EQ(ri->outputs[0].text, upto9 + upto10.substr(upto9.size(), 1));
}

TEST(Generator, StopTokenIdsMinTokensAndMaxTokens) {
  auto g = testing::LoadGenerator(Qwen3());
  ASSERT_NE(g, nullptr);
  const Reference ref = GreedyReference(*g);
  const int32_t stop_tok = ref.tokens[4];
  SamplingParams p = Greedy(30);
  p.stop_token_ids = {stop_tok};
  auto plain = Request(Prompt(), p);
  // min_tokens: the stop token cannot be produced before 8 tokens (it is masked), so the
  // continuation changes at step 4 and nothing stops before 8 tokens.
  SamplingParams pm = p;
  pm.min_tokens = 8;
  auto minimum = Request(Prompt(), pm);
  auto capped = Request(Prompt(), Greedy(3));
  testing::RunAll(*g, {plain, minimum, capped});
  EXPECT_EQ(plain->outputs[0].token_ids,
            std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 5));
  EXPECT_EQ(plain->outputs[0].finish_reason, "stop");
  EXPECT_EQ(plain->outputs[0].stop_token, std::optional<int32_t>(stop_tok));
  const auto& mt = minimum->outputs[0].token_ids;
  ASSERT_GE(mt.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NE(mt[i], stop_tok) << i;
  EXPECT_NE(mt[4], ref.tokens[4]);
  EXPECT_EQ(capped->outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(capped->outputs[0].finish_reason, "length");
}

TEST(Generator, LogitBiasChangesTheOutput) {
  auto g = testing::LoadGenerator(Qwen3());
  ASSERT_NE(g, nullptr);
  const Reference ref = GreedyReference(*g, 5);
  SamplingParams p = Greedy(5);
  p.logit_bias = {{77, 100.f}};
  auto biased = Request(Prompt(), p);
  SamplingParams q = Greedy(5);
  q.logit_bias = {{ref.tokens[0], -100.f}};
  auto banned = Request(Prompt(), q);
  testing::RunAll(*g, {biased, banned});
  EXPECT_EQ(biased->outputs[0].token_ids, std::vector<int32_t>(5, 77));
  EXPECT_NE(banned->outputs[0].token_ids[0], ref.tokens[0]);
}

TEST(Generator, NCompletionsShareThePromptAndDiffer) {
  testing::GenSetup s;
  s.prefix_caching = false;  // the sharing comes from the fork, not the cache
  auto g = testing::LoadGenerator(Qwen3(), s);
  ASSERT_NE(g, nullptr);
  SamplingParams p;
  p.n = 4;
  p.temperature = 1.0f;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.seed = 5;
  std::vector<int32_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + static_cast<int32_t>(i);
  auto r = Request(prompt, p);
  int max_in_use = 0;
  testing::RunAll(*g, {r}, [&] { max_in_use = std::max(max_in_use, g->blocks().in_use()); });
  ASSERT_EQ(r->outputs.size(), 4u);
  for (const auto& o : r->outputs) {
    EXPECT_EQ(o.token_ids.size(), 12u);
    EXPECT_EQ(o.finish_reason, "length");
  }
  EXPECT_NE(r->outputs[0].token_ids, r->outputs[1].token_ids);
  EXPECT_NE(r->outputs[1].token_ids, r->outputs[2].token_ids);
  // 37 + 12 tokens: 4 blocks each alone; shared: 2 full prompt blocks + 2 own each.
  EXPECT_LE(max_in_use, 2 + 4 * 2);
  // The prompt ran once.
  EXPECT_EQ(g->stats().prompt_tokens, 37);
  EXPECT_EQ(g->blocks().in_use(), 0);
  // Same seed, same completions.
  auto again = Request(prompt, p);
  testing::RunAll(*g, {again});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(again->outputs[i].token_ids, r->outputs[i].token_ids);
}

TEST(Generator, StreamingDeliveriesAndCancellationFreeBlocks) {
  auto g = testing::LoadGenerator(Qwen3());
  ASSERT_NE(g, nullptr);
  auto r = Request(Prompt(), Greedy(50));
  int deliveries = 0, done = 0;
  size_t last = 0;
  Status final_status;
  r->sink.on_output = [&](GenerateRequest& q) {
    ++deliveries;
    EXPECT_GT(q.outputs[0].token_ids.size(), last);  // every delivery adds tokens
    last = q.outputs[0].token_ids.size();
  };
  r->sink.on_done = [&](GenerateRequest&, const Status& s) {
    ++done;
    final_status = s;
  };
  auto other = Request(Prompt(), Greedy(50));
  ASSERT_TRUE(g->Add(r).ok());
  ASSERT_TRUE(g->Add(other).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(g->Step().ok());
  EXPECT_EQ(deliveries, 5);
  const int in_use = g->blocks().in_use();
  EXPECT_GT(in_use, 0);
  g->Abort(*r);  // frees its blocks before returning
  EXPECT_LT(g->blocks().in_use(), in_use);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(final_status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r->outputs[0].finish_reason, "abort");
  // The cancelled flag (any thread) is honoured at the next step.
  other->cancelled = true;
  ASSERT_TRUE(g->Step().ok());
  EXPECT_FALSE(g->HasWork());
  EXPECT_EQ(g->blocks().in_use(), 0);
  EXPECT_EQ(other->outputs[0].finish_reason, "abort");
}

TEST(Generator, AdmissionErrorsNameTheFieldOrNumbers) {
  testing::GenSetup s;
  s.max_model_len = 64;
  auto g = testing::LoadGenerator(Qwen3(), s);
  ASSERT_NE(g, nullptr);
  auto expect = [&](SamplingParams p, std::vector<int32_t> prompt, StatusCode code,
                    const std::string& text) {
    Status st = g->Add(Request(std::move(prompt), std::move(p)));
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
  };
  const auto ok = Prompt();
  SamplingParams p;
  p.max_tokens = 60;
  expect(p, ok, StatusCode::kOutOfRange, "prompt (5 tokens) + max_tokens (60) = 65 tokens exceeds");
  expect(SamplingParams{}, std::vector<int32_t>(64, 5), StatusCode::kOutOfRange,
         "the prompt has 64 tokens");
  p = {};
  p.temperature = -1.f;
  expect(p, ok, StatusCode::kInvalidArgument, "temperature");
  p = {};
  p.top_p = 0.f;
  expect(p, ok, StatusCode::kInvalidArgument, "top_p");
  p = {};
  p.top_k = -2;
  expect(p, ok, StatusCode::kInvalidArgument, "top_k");
  p = {};
  p.min_p = 1.5f;
  expect(p, ok, StatusCode::kInvalidArgument, "min_p");
  p = {};
  p.presence_penalty = 3.f;
  expect(p, ok, StatusCode::kInvalidArgument, "presence_penalty");
  p = {};
  p.repetition_penalty = 0.f;
  expect(p, ok, StatusCode::kInvalidArgument, "repetition_penalty");
  p = {};
  p.n = 0;
  expect(p, ok, StatusCode::kInvalidArgument, "n must be");
  p = {};
  p.logprobs = 21;
  expect(p, ok, StatusCode::kInvalidArgument, "logprobs");
  p = {};
  p.logit_bias = {{1 << 20, 1.f}};
  expect(p, ok, StatusCode::kInvalidArgument, "logit_bias");
  p = {};
  p.stop_token_ids = {-1};
  expect(p, ok, StatusCode::kInvalidArgument, "stop_token_ids");
  p = {};
  p.max_tokens = 4;
  p.min_tokens = 5;
  expect(p, ok, StatusCode::kInvalidArgument, "min_tokens");
  expect(SamplingParams{}, {1, 1 << 20}, StatusCode::kInvalidArgument, "prompt token 1");
  expect(SamplingParams{}, {}, StatusCode::kInvalidArgument, "empty");
  EXPECT_FALSE(g->HasWork());  // nothing was queued
}

TEST(Generator, KvCacheLimitsAreEnforced) {
  // A cache smaller than one sequence of max_model_len refuses to start, with the numbers.
  auto bundle = LoadModelBundle(Qwen3());
  ASSERT_TRUE(bundle.ok());
  GenerationOptions o;
  o.backend.device = testing::TestDevice();
  o.backend.num_threads = 2;
  o.max_model_len = 256;
  o.kv_cache_memory = 9 * KvCache::BlockBytes(2, 64, DType::kF32);  // 8 blocks = 128 tokens
  auto g = Generator::Load(*bundle, o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("less than one sequence of --max-model-len 256"),
            std::string::npos)
      << g.status().message();
  // A cache that holds one sequence of max_model_len runs every request, however many
  // (here n = 3 completions of 100 tokens in a cache of 128 tokens), through preemptions.
  o.max_model_len = 128;
  auto g2 = Generator::Load(*bundle, o);
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  SamplingParams p;
  p.n = 3;
  p.max_tokens = 60;
  p.temperature = 0.8f;
  p.ignore_eos = true;
  auto r = Request(std::vector<int32_t>(40, 7), p);
  testing::RunAll(**g2, {r});
  for (const auto& out : r->outputs) EXPECT_EQ(out.token_ids.size(), 60u);
  EXPECT_GT((*g2)->stats().preemptions, 0);
  EXPECT_EQ((*g2)->blocks().in_use(), 0);
}

}  // namespace
}  // namespace sluice
