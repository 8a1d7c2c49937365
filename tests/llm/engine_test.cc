// The engine's correctness oracle (vLLM's): with greedy decoding a request's output does
// not depend on what runs with it, how its prefill is chunked, whether it was preempted,
// or whether its prefix came from the cache.
#include "raio/llm/engine.h"

#include <gtest/gtest.h>

#include <map>

#include "raio/llm/model.h"
#include "test_util.h"

namespace raio::llm {
namespace {

using testing::ModelDir;

constexpr int64_t kBlockBytes = 2 * 5 * 16 * 32 * 4;  // stories260K, 16-token blocks

std::unique_ptr<Engine> MakeEngine(EngineConfig config = {}) {
  SetTorchThreads(1);
  auto m = LoadModelDir(ModelDir());
  EXPECT_TRUE(m.ok()) << m.status();
  auto e = Engine::Create(*std::move(m), config);
  EXPECT_TRUE(e.ok()) << e.status();
  return *std::move(e);
}

SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

struct Case {
  std::vector<int> prompt;
  int max_tokens;
};

// 32 requests of different prompt and output lengths; the first half share a prefix.
std::vector<Case> Cases(const Tokenizer& tok) {
  const char* words[] = {"Once upon a time", "Tom had a dog", "The sun was hot",
                         "Lily and Ben",     "A little bird", "One day, a cat"};
  std::vector<Case> out;
  std::vector<int> shared = tok.Encode("Once upon a time, there was a big tree in the park.");
  for (int i = 0; i < 32; ++i) {
    std::vector<int> p = {1};
    if (i < 16) p.insert(p.end(), shared.begin(), shared.end());
    for (int k = 0; k <= i % 4; ++k) {
      std::vector<int> w = tok.Encode(words[(i + k) % 6]);
      p.insert(p.end(), w.begin(), w.end());
    }
    out.push_back({p, 8 + (i * 37) % 90});
  }
  return out;
}

// Outputs of every case run alone (prefix caching off, so no case helps another).
std::vector<std::vector<int>> RunAlone(const std::vector<Case>& cases) {
  auto e = MakeEngine({.enable_prefix_caching = false});
  std::vector<std::vector<int>> out;
  for (const Case& c : cases) {
    auto r = e->Generate(c.prompt, Greedy(c.max_tokens));
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r->token_ids);
  }
  return out;
}

// Adds every case at once and steps until all finish; returns outputs in case order.
std::vector<std::vector<int>> RunBatched(Engine& e, const std::vector<Case>& cases) {
  std::vector<std::vector<int>> out(cases.size());
  std::vector<bool> done(cases.size(), false);
  for (size_t i = 0; i < cases.size(); ++i) {
    auto id = e.AddRequest(cases[i].prompt, Greedy(cases[i].max_tokens),
                           [&out, &done, i](const RequestOutput& o) {
                             out[i].insert(out[i].end(), o.token_ids.begin(), o.token_ids.end());
                             if (o.finished) done[i] = true;
                           });
    EXPECT_TRUE(id.ok()) << id.status();
  }
  while (e.Step()) {
  }
  for (bool d : done) EXPECT_TRUE(d);
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = MakeEngine();
    cases_ = new std::vector<Case>(Cases(e->tokenizer()));
    alone_ = new std::vector<std::vector<int>>(RunAlone(*cases_));
  }
  static void TearDownTestSuite() {
    delete cases_;
    delete alone_;
  }
  static std::vector<Case>* cases_;
  static std::vector<std::vector<int>>* alone_;
};
std::vector<Case>* EngineTest::cases_ = nullptr;
std::vector<std::vector<int>>* EngineTest::alone_ = nullptr;

TEST_F(EngineTest, GreedyFromBosGivesTheDocumentedText) {
  auto e = MakeEngine();
  auto r = e->Generate({1}, Greedy(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text.substr(0, strlen(testing::kKnownGreedyText)), testing::kKnownGreedyText);
  EXPECT_EQ(r->finish_reason, FinishReason::kLength);
  EXPECT_EQ(r->token_ids.size(), 60u);
}

TEST_F(EngineTest, BatchOf32MatchesEachRequestAlone) {
  auto e = MakeEngine();
  EXPECT_EQ(RunBatched(*e, *cases_), *alone_);
}

TEST_F(EngineTest, ChunkedPrefillMatchesAlone) {
  // A 7-token budget chunks every prompt and mixes prefill chunks with decodes.
  auto e = MakeEngine({.max_num_batched_tokens = 7, .enable_prefix_caching = false});
  EXPECT_EQ(RunBatched(*e, *cases_), *alone_);
}

TEST_F(EngineTest, PreemptedRequestsMatchAlone) {
  // 32 blocks (one full-length sequence) for 32 requests: preemption by recompute.
  auto e = MakeEngine({.kv_cache_bytes = 32 * kBlockBytes, .enable_prefix_caching = false});
  EXPECT_EQ(RunBatched(*e, *cases_), *alone_);
  EXPECT_GT(e->Stats().num_preemptions, 0);
  EXPECT_EQ(e->Stats().free_blocks, 32);
}

TEST_F(EngineTest, PrefixCacheHitsMatchAlone) {
  auto e = MakeEngine();
  auto first = e->Generate((*cases_)[0].prompt, Greedy((*cases_)[0].max_tokens));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->cached_prompt_tokens, 0);
  for (int i = 1; i < 16; ++i) {
    auto r = e->Generate((*cases_)[i].prompt, Greedy((*cases_)[i].max_tokens));
    ASSERT_TRUE(r.ok());
    EXPECT_GE(r->cached_prompt_tokens, 16) << i;  // the shared prefix's full blocks
    EXPECT_EQ(r->token_ids, (*alone_)[i]) << i;
  }
  EXPECT_GT(e->Stats().prefix_cache_hits, 0);
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto e = MakeEngine();
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.9;
  p.top_k = 50;
  p.max_tokens = 40;
  p.ignore_eos = true;
  p.seed = 1234;
  auto a = e->Generate({1}, p);
  auto b = e->Generate({1}, p);  // second run hits the prefix cache: same draws still
  p.seed = 99;
  auto c = e->Generate({1}, p);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->token_ids, b->token_ids);
  EXPECT_NE(a->token_ids, c->token_ids);
}

TEST_F(EngineTest, StopStringCutsExactlyAndStreamedDeltasAddUp) {
  auto e = MakeEngine();
  SamplingParams p = Greedy(60);
  p.stop = {"Lily", "zzz"};
  std::string streamed;
  FinishReason reason = FinishReason::kNone;
  ASSERT_TRUE(e->AddRequest({1}, p, [&](const RequestOutput& o) {
                 streamed += o.text;
                 EXPECT_EQ(streamed.find("Li"), std::string::npos);  // held back, then cut
                 if (o.finished) reason = o.finish_reason;
               }).ok());
  while (e->Step()) {
  }
  EXPECT_EQ(streamed, "Once upon a time, there was a little girl named ");
  EXPECT_EQ(reason, FinishReason::kStop);
}

TEST_F(EngineTest, AbortFreesBlocksAtOnce) {
  auto e = MakeEngine();
  bool aborted = false;
  auto id = e->AddRequest({1, 2, 3, 4, 5}, Greedy(200), [&](const RequestOutput& o) {
    if (o.finished) aborted = o.finish_reason == FinishReason::kAbort;
  });
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 40; ++i) e->Step();
  EXPECT_LT(e->Stats().free_blocks, e->Stats().num_blocks);
  e->Abort(*id);
  EXPECT_FALSE(e->Step());
  EXPECT_TRUE(aborted);
  EXPECT_EQ(e->Stats().free_blocks, e->Stats().num_blocks);
  EXPECT_EQ(e->Stats().running, 0);
}

TEST_F(EngineTest, RejectsBadRequestsAndAFullQueue) {
  auto e = MakeEngine({.max_num_seqs = 2, .max_queued_requests = 1});
  EXPECT_EQ(e->AddRequest({}, Greedy(5), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest({1, 9999}, Greedy(5), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest(std::vector<int>(500, 5), Greedy(20), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(e->AddRequest({1}, Greedy(5), nullptr).ok());
  EXPECT_EQ(e->AddRequest({1}, Greedy(5), nullptr).status().code(),
            absl::StatusCode::kResourceExhausted);
  while (e->Step()) {
  }
  EXPECT_TRUE(e->AddRequest({1}, Greedy(5), nullptr).ok());
}

// Regression: ids were "req-<counter>" from 0 in every engine, so an engine actor restarted
// after its process died would hand out "req-0" again while a front's connection still
// polled the dead engine's "req-0" (and took the new request's outputs).
TEST_F(EngineTest, RequestIdsDifferBetweenEngines) {
  auto a = MakeEngine(), b = MakeEngine();
  auto id_a = a->AddRequest({1}, Greedy(1), nullptr);
  auto id_b = b->AddRequest({1}, Greedy(1), nullptr);
  ASSERT_TRUE(id_a.ok() && id_b.ok());
  EXPECT_NE(*id_a, *id_b);
  auto id_a2 = a->AddRequest({1}, Greedy(1), nullptr);
  ASSERT_TRUE(id_a2.ok());
  EXPECT_NE(*id_a, *id_a2);
}

TEST_F(EngineTest, LogprobsOfGreedyTokensAreTheTopOnes) {
  auto e = MakeEngine();
  SamplingParams p = Greedy(5);
  p.logprobs = 3;
  auto r = e->Generate({1}, p);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->logprobs.size(), 5u);
  for (const SampledToken& s : r->logprobs) {
    ASSERT_EQ(s.top.size(), 3u);
    EXPECT_EQ(s.top[0].token, s.token);
    EXPECT_FLOAT_EQ(s.top[0].logprob, s.logprob);
    EXPECT_LT(s.logprob, 0);
  }
}

TEST_F(EngineTest, StartedEngineServesConcurrentGenerates) {
  auto e = MakeEngine();
  e->Start();
  std::vector<std::thread> threads;
  std::vector<std::vector<int>> out(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r = e->Generate((*cases_)[i].prompt, Greedy((*cases_)[i].max_tokens));
      if (r.ok()) out[i] = r->token_ids;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], (*alone_)[i]) << i;
  e->Stop();
}

}  // namespace
}  // namespace raio::llm
