// The V1-style scheduler alone, with hand-made requests and no model.
#include "raio/llm/scheduler.h"

#include <gtest/gtest.h>

namespace raio::llm::internal {
namespace {

std::unique_ptr<Request> MakeRequest(int prompt_len, int first_token = 10) {
  auto r = std::make_unique<Request>();
  for (int i = 0; i < prompt_len; ++i) r->prompt.push_back(first_token + i);
  r->tokens = r->prompt;
  return r;
}

// Marks every scheduled chunk computed; a chunk that completes its tokens appends one
// generated token, as the engine does after sampling.
void Complete(Scheduler& s, const std::vector<ScheduledChunk>& chunks) {
  for (const ScheduledChunk& c : chunks) {
    s.OnChunkComputed(c);
    if (c.request->num_computed == c.request->num_tokens()) c.request->tokens.push_back(7);
  }
}

TEST(SchedulerTest, DecodesFirstThenChunkedPrefillWithinTheTokenBudget) {
  BlockPool pool(64, 4);
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 10}, &pool);
  auto a = MakeRequest(3), b = MakeRequest(3, 100), c = MakeRequest(3, 200);
  s.Add(a.get());
  s.Add(b.get());
  s.Add(c.get());
  Complete(s, s.Schedule());  // three prefills of 3 tokens
  auto big = MakeRequest(20, 300);
  s.Add(big.get());
  std::vector<ScheduledChunk> step = s.Schedule();
  ASSERT_EQ(step.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(step[i].num_tokens, 1);  // one decode token each
  EXPECT_EQ(step[3].request, big.get());
  EXPECT_EQ(step[3].num_tokens, 7);  // the rest of the budget: a prefill chunk
  Complete(s, step);
  step = s.Schedule();
  EXPECT_EQ(step[3].num_tokens, 7);
  Complete(s, step);
  step = s.Schedule();
  EXPECT_EQ(step[3].num_tokens, 6);  // 20 = 7 + 7 + 6
}

TEST(SchedulerTest, MaxNumSeqsCapsRunningRequests) {
  BlockPool pool(64, 4);
  Scheduler s({.max_num_seqs = 2, .max_num_batched_tokens = 100}, &pool);
  auto a = MakeRequest(2), b = MakeRequest(2, 50), c = MakeRequest(2, 90);
  s.Add(a.get());
  s.Add(b.get());
  s.Add(c.get());
  EXPECT_EQ(s.Schedule().size(), 2u);
  EXPECT_EQ(s.running().size(), 2u);
  EXPECT_EQ(s.waiting().size(), 1u);
}

TEST(SchedulerTest, PreemptsTheNewestRunningRequestWhenBlocksRunOut) {
  BlockPool pool(4, 4, /*enable_prefix_caching=*/false);
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 100}, &pool);
  auto a = MakeRequest(8), b = MakeRequest(8, 100);  // two blocks each: the pool is full
  s.Add(a.get());
  s.Add(b.get());
  Complete(s, s.Schedule());  // both prefilled, one generated token each: 9 tokens > 2 blocks
  std::vector<ScheduledChunk> step = s.Schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].request, a.get());  // the older one keeps running
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(b->num_computed, 0);  // recomputed from scratch later
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(s.waiting().front(), b.get());
  EXPECT_EQ(s.num_preemptions(), 1);
}

TEST(SchedulerTest, NewRequestReusesCachedPrefixBlocksButComputesItsLastToken) {
  BlockPool pool(16, 4);
  Scheduler s({.max_num_seqs = 8, .max_num_batched_tokens = 100}, &pool);
  auto a = MakeRequest(8);
  s.Add(a.get());
  Complete(s, s.Schedule());
  s.Remove(a.get());        // finished: its two full blocks stay cached
  auto b = MakeRequest(8);  // the same 8 prompt tokens
  s.Add(b.get());
  std::vector<ScheduledChunk> step = s.Schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(b->num_cached_prompt_tokens, 4);  // one block: the last token is recomputed
  EXPECT_EQ(step[0].num_tokens, 4);
}

}  // namespace
}  // namespace raio::llm::internal
