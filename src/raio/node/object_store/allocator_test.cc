#include "raio/node/object_store/allocator.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace raio::node {
namespace {

using Blocks = std::vector<std::pair<uint64_t, uint64_t>>;

TEST(AllocatorTest, CapacityRoundsDownToTheAlignment) {
  Allocator a(1000);
  EXPECT_EQ(a.capacity(), 960u);
  EXPECT_EQ(a.free_bytes(), 960u);
  EXPECT_EQ(a.FreeBlocks(), (Blocks{{0, 960}}));
}

TEST(AllocatorTest, OffsetsAndSizesAreMultiplesOf64Bytes) {
  Allocator a(4096);
  EXPECT_EQ(Allocator::AlignedSize(0), 0u);
  EXPECT_EQ(Allocator::AlignedSize(1), 64u);
  EXPECT_EQ(Allocator::AlignedSize(64), 64u);
  EXPECT_EQ(Allocator::AlignedSize(65), 128u);
  EXPECT_EQ(a.Allocate(1), 0u);
  EXPECT_EQ(a.Allocate(65), 64u);
  EXPECT_EQ(a.Allocate(64), 192u);
  EXPECT_EQ(a.Allocate(3), 256u);
  EXPECT_EQ(a.AllocatedSize(0), 64u);
  EXPECT_EQ(a.AllocatedSize(64), 128u);
  EXPECT_EQ(a.AllocatedSize(100), 0u);
  EXPECT_EQ(a.used_bytes(), 64u + 128u + 64u + 64u);
  EXPECT_EQ(a.num_allocated_blocks(), 4u);
}

TEST(AllocatorTest, ReusesTheLowestFreedOffsetFirst) {
  Allocator a(1024);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(a.Allocate(64), i * 64);
  a.Free(448);
  a.Free(128);
  a.Free(320);
  // Lowest offset first, whatever the order of the frees.
  EXPECT_EQ(a.Allocate(10), 128u);
  EXPECT_EQ(a.Allocate(10), 320u);
  EXPECT_EQ(a.Allocate(10), 448u);
  EXPECT_EQ(a.Allocate(10), 512u);  // the never-used tail comes last
}

TEST(AllocatorTest, FirstFitSkipsHolesThatAreTooSmall) {
  Allocator a(1024);
  ASSERT_EQ(a.Allocate(64), 0u);
  ASSERT_EQ(a.Allocate(64), 64u);
  ASSERT_EQ(a.Allocate(256), 128u);
  ASSERT_EQ(a.Allocate(64), 384u);
  a.Free(0);                         // 64-byte hole
  a.Free(128);                       // 256-byte hole
  EXPECT_EQ(a.Allocate(128), 128u);  // skips the 64-byte hole at 0
  EXPECT_EQ(a.Allocate(64), 0u);
  EXPECT_EQ(a.Allocate(128), 256u);  // the rest of the 256-byte hole
  EXPECT_EQ(a.FreeBlocks(), (Blocks{{448, 576}}));
}

TEST(AllocatorTest, FreedNeighboursCoalesceIntoOneBlock) {
  Allocator a(512);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(a.Allocate(128), i * 128);
  EXPECT_EQ(a.num_free_blocks(), 0u);
  a.Free(0);
  a.Free(256);
  EXPECT_EQ(a.FreeBlocks(), (Blocks{{0, 128}, {256, 128}}));
  a.Free(128);  // joins both neighbours
  EXPECT_EQ(a.FreeBlocks(), (Blocks{{0, 384}}));
  a.Free(384);  // joins the block before it
  EXPECT_EQ(a.FreeBlocks(), (Blocks{{0, 512}}));
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.Allocate(512), 0u);
}

TEST(AllocatorTest, FragmentedFreeSpaceCannotHoldALargerBlock) {
  Allocator a(256);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(a.Allocate(64), i * 64);
  a.Free(0);
  a.Free(128);
  EXPECT_EQ(a.free_bytes(), 128u);
  EXPECT_EQ(a.largest_free_block(), 64u);
  EXPECT_EQ(a.Allocate(128), std::nullopt);
  EXPECT_EQ(a.used_bytes(), 128u);  // a refused allocation takes nothing
  a.Free(64);
  EXPECT_EQ(a.largest_free_block(), 192u);
  EXPECT_EQ(a.Allocate(128), 0u);
}

TEST(AllocatorTest, RefusesMoreThanTheFreeSpace) {
  Allocator a(1024);
  EXPECT_EQ(a.Allocate(1025), std::nullopt);
  EXPECT_EQ(a.Allocate(UINT64_MAX), std::nullopt);
  EXPECT_EQ(a.Allocate(1024), 0u);
  EXPECT_EQ(a.Allocate(1), std::nullopt);
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.largest_free_block(), 0u);
}

}  // namespace
}  // namespace raio::node
