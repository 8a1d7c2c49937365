#include "raio/llm/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>

namespace raio::llm {
namespace {

std::vector<int> Tokens(int n, int start = 0) {
  std::vector<int> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Registers `blocks` as the cached blocks of `tokens`, as the scheduler does.
void CacheAll(BlockPool& pool, const std::vector<int>& blocks, const std::vector<int>& tokens) {
  uint64_t parent = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::span<const int> t = std::span<const int>(tokens).subspan(b * 4, 4);
    parent = BlockPool::HashBlock(parent, t);
    pool.CacheFullBlock(blocks[b], parent, t);
  }
}

TEST(BlockPoolTest, AllocatesUntilEmptyThenRefuses) {
  BlockPool pool(4, 4);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_FALSE(pool.Allocate(2));
  EXPECT_EQ(pool.num_free_blocks(), 1);  // a refused allocation takes nothing
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.75);
  pool.Free(*a);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPoolTest, SharesCachedPrefixBlocksWithReferenceCounts) {
  BlockPool pool(8, 4);
  std::vector<int> tokens = Tokens(10);
  auto a = pool.Allocate(3);
  CacheAll(pool, {(*a)[0], (*a)[1]}, tokens);
  std::vector<int> hit = pool.AcquireCachedPrefix(tokens, 8);
  EXPECT_EQ(hit, (std::vector<int>{(*a)[0], (*a)[1]}));
  pool.Free(*a);
  EXPECT_EQ(pool.num_free_blocks(), 6);  // the shared two are still referenced
  pool.Free(hit);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  // Freed but still cached: found again.
  EXPECT_EQ(pool.AcquireCachedPrefix(tokens, 8).size(), 2u);
}

TEST(BlockPoolTest, DifferentPrefixDoesNotMatchEqualLaterBlock) {
  BlockPool pool(8, 4);
  std::vector<int> t1 = {1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<int> t2 = {5, 6, 7, 8, 9, 9, 9, 9};
  auto a = pool.Allocate(2);
  CacheAll(pool, *a, t1);
  EXPECT_TRUE(pool.AcquireCachedPrefix(t2, 8).empty());
  EXPECT_EQ(pool.AcquireCachedPrefix(t1, 1).size(), 1u);  // max_blocks caps the match
}

TEST(BlockPoolTest, EvictsLeastRecentlyFreedFirst) {
  BlockPool pool(2, 4);
  std::vector<int> ta = Tokens(4, 0), tb = Tokens(4, 100);
  auto a = pool.Allocate(1);
  auto b = pool.Allocate(1);
  CacheAll(pool, *a, ta);
  CacheAll(pool, *b, tb);
  pool.Free(*a);  // a freed first: evicted first
  pool.Free(*b);
  auto c = pool.Allocate(1);
  EXPECT_EQ(*c, *a);
  EXPECT_TRUE(pool.AcquireCachedPrefix(ta, 1).empty());
  EXPECT_EQ(pool.AcquireCachedPrefix(tb, 1), *b);
}

}  // namespace
}  // namespace raio::llm
