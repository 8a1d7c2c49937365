#include "raio/llm/sampling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace raio::llm {
namespace {

TEST(SamplingTest, GreedyTakesTheArgmax) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  std::mt19937_64 rng(1);
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(Sample(logits, p, rng).token, 1);
}

TEST(SamplingTest, TopKOneIsGreedy) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  std::mt19937_64 rng(1);
  SamplingParams p;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Sample(logits, p, rng).token, 1);
}

TEST(SamplingTest, TopPKeepsOnlyTheNucleus) {
  // Probabilities about 0.50, 0.30, 0.20 (temperature 1).
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::mt19937_64 rng(3);
  SamplingParams p;
  p.top_p = 0.7;  // 0.5 + 0.3 reaches it: token 2 is never drawn
  int seen[3] = {0, 0, 0};
  for (int i = 0; i < 2000; ++i) ++seen[Sample(logits, p, rng).token];
  EXPECT_EQ(seen[2], 0);
  EXPECT_GT(seen[0], seen[1]);
  EXPECT_GT(seen[1], 300);
}

TEST(SamplingTest, SameSeedSameDraws) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Sample(logits, p, a).token, Sample(logits, p, b).token);
}

TEST(SamplingTest, LogprobsAreNormalisedAndSorted) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  std::mt19937_64 rng(1);
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  SampledToken s = Sample(logits, p, rng);
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(s.logprob, 3.0 - z, 1e-6);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].token, 2);
  EXPECT_EQ(s.top[1].token, 1);
  EXPECT_NEAR(s.top[1].logprob, 2.0 - z, 1e-6);
}

TEST(SamplingTest, ValidateRejectsOutOfRangeValues) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.temperature = -0.1;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(p.Validate().ok());
  p.top_p = 1.5;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.max_tokens = 0;
  EXPECT_FALSE(p.Validate().ok());
}

}  // namespace
}  // namespace raio::llm
