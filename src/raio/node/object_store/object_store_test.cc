#include "raio/node/object_store/object_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "raio/node/object_store/object_store_test_fixture.h"

namespace raio::node {
namespace {

using testkit::FileExists;
using testkit::Id;
using testkit::kCapacity;
using testkit::kQuarter;
using testkit::ListDir;
using testkit::ObjectStoreTest;
using testkit::PatternByte;

TEST_F(ObjectStoreTest, CreateSealPinUnpinDeleteLifecycle) {
  const ObjectId a = Id(1);
  absl::StatusOr<ObjectLocation> loc = store_->CreateObject(a, 1000, /*client=*/7);
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(*loc, (ObjectLocation{0, 1000}));
  ObjectStoreStats s = store_->stats();
  EXPECT_EQ(s.capacity_bytes, kCapacity);
  EXPECT_EQ(s.used_bytes, 1024u);
  EXPECT_EQ(s.pinned_bytes, 1024u);
  EXPECT_EQ(s.num_objects, 1u);
  ASSERT_TRUE(Info(a).has_value());
  EXPECT_EQ(Info(a)->state, ObjectState::kUnsealed);
  EXPECT_EQ(Info(a)->num_pins, 1u);
  EXPECT_EQ(Info(a)->size, 1000u);
  EXPECT_STREQ(ObjectStateName(Info(a)->state), "unsealed");

  EXPECT_EQ(store_->CreateObject(a, 10, 8).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Pin(a, 8).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->Seal(a).ok());
  EXPECT_EQ(store_->Seal(a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Seal(Id(99)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StateOf(a), ObjectState::kSealed);

  absl::StatusOr<ObjectLocation> pinned = store_->Pin(a, 8);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(*pinned, *loc);
  EXPECT_EQ(Info(a)->num_pins, 2u);
  store_->Unpin(a, 7);
  store_->Unpin(a, 7);  // client 7 holds no pin any more: ignored
  store_->Unpin(Id(99), 7);
  EXPECT_EQ(Info(a)->num_pins, 1u);
  store_->Unpin(a, 8);
  s = store_->stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.used_bytes, 1024u);

  store_->Delete(a);
  store_->Delete(Id(99));  // ignored
  s = store_->stats();
  EXPECT_EQ(s.num_objects, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(store_->Pin(a, 8).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->List().empty());
}

TEST_F(ObjectStoreTest, OffsetsAre64ByteAlignedAndEmptyObjectsTakeNoMemory) {
  EXPECT_EQ(*store_->CreateObject(Id(1), 1, 1), (ObjectLocation{0, 1}));
  EXPECT_EQ(*store_->CreateObject(Id(2), 63, 1), (ObjectLocation{64, 63}));
  EXPECT_EQ(*store_->CreateObject(Id(3), 65, 1), (ObjectLocation{128, 65}));
  EXPECT_EQ(*store_->CreateObject(Id(4), 100, 1), (ObjectLocation{256, 100}));
  EXPECT_EQ(*store_->CreateObject(Id(5), 0, 1), (ObjectLocation{0, 0}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(store_->base()) % 64, 0u);
  EXPECT_EQ(store_->stats().used_bytes, 64u + 64 + 128 + 128);
  EXPECT_EQ(store_->stats().num_objects, 5u);
  ASSERT_TRUE(store_->Seal(Id(5)).ok());
  EXPECT_EQ(*store_->Pin(Id(5), 2), (ObjectLocation{0, 0}));
}

TEST_F(ObjectStoreTest, ReusesFreedMemoryAtTheLowestOffset) {
  PutSealed(Id(1), 1000, 1);
  PutSealed(Id(2), 1000, 2);
  PutSealed(Id(3), 1000, 3);
  store_->Delete(Id(3));
  store_->Delete(Id(1));
  EXPECT_EQ(store_->CreateObject(Id(4), 500, 1)->offset, 0u);
  EXPECT_EQ(store_->CreateObject(Id(5), 500, 1)->offset, 512u);
  EXPECT_EQ(store_->CreateObject(Id(6), 500, 1)->offset, 2048u);
}

TEST_F(ObjectStoreTest, FreedNeighboursCoalesceForALargerObject) {
  for (uint32_t i = 0; i < 4; ++i) PutSealed(Id(i), kQuarter, i);
  store_->Delete(Id(1));
  store_->Delete(Id(2));
  absl::StatusOr<ObjectLocation> big = store_->CreateObject(Id(9), 2 * kQuarter, 1);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->offset, kQuarter);
  EXPECT_EQ(store_->stats().num_spilled, 0u);
  EXPECT_TRUE(ListDir(spill_dir_).empty());
}

TEST_F(ObjectStoreTest, FragmentedFreeSpaceIsRefusedWhenNothingCanMove) {
  std::unique_ptr<ObjectStore> store = MakeStore(/*spill_dir=*/"");
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(store->CreateObject(Id(i), kQuarter, 1).ok());
  store->Unpin(Id(0), 1);
  store->Delete(Id(0));  // still unsealed, but deleted: its memory goes
  store->Unpin(Id(2), 1);
  store->Delete(Id(2));
  EXPECT_EQ(store->stats().used_bytes, 2 * kQuarter);
  absl::StatusOr<ObjectLocation> big = store->CreateObject(Id(9), 2 * kQuarter, 1);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("largest free block 262144 bytes"), std::string::npos)
      << big.status();
  EXPECT_NE(big.status().message().find("(spilling is off)"), std::string::npos);
  EXPECT_EQ(store->CreateObject(Id(10), kQuarter, 1)->offset, 0u);
}

TEST_F(ObjectStoreTest, DeleteOfPinnedObjectWaitsForTheLastUnpin) {
  PutSealed(Id(0), 1000, 0);
  ASSERT_TRUE(store_->Pin(Id(0), 2).ok());
  ASSERT_TRUE(store_->Pin(Id(0), 3).ok());
  store_->Delete(Id(0));
  ASSERT_TRUE(Info(Id(0)).has_value());
  EXPECT_TRUE(Info(Id(0))->delete_pending);
  EXPECT_EQ(store_->stats().used_bytes, 1024u);
  EXPECT_EQ(store_->Pin(Id(0), 4).status().code(), absl::StatusCode::kNotFound);
  store_->Unpin(Id(0), 2);
  EXPECT_TRUE(Info(Id(0)).has_value());
  EXPECT_EQ(store_->stats().used_bytes, 1024u);
  store_->Unpin(Id(0), 3);
  EXPECT_FALSE(Info(Id(0)).has_value());
  EXPECT_EQ(store_->stats().used_bytes, 0u);
  EXPECT_EQ(store_->stats().num_objects, 0u);
}

TEST_F(ObjectStoreTest, AnotherProcessMappingSeesTheSameBytes) {
  absl::StatusOr<ObjectLocation> loc = store_->CreateObject(Id(0), 4096, 1);
  ASSERT_TRUE(loc.ok());
  // What a client does with the descriptor it received: map it (here, a copy of it).
  int fd = dup(store_->shm_fd());
  ASSERT_GE(fd, 0);
  void* m = mmap(nullptr, kCapacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(m, MAP_FAILED);
  auto* client = static_cast<uint8_t*>(m);
  for (uint64_t i = 0; i < loc->size; ++i) client[loc->offset + i] = PatternByte(i, 5);
  EXPECT_TRUE(Matches(*store_, *loc, 5));
  munmap(m, kCapacity);
}

TEST_F(ObjectStoreTest, DisconnectClientDropsPinsAndRemovesItsUnsealedObjects) {
  PutSealed(Id(0), 1000, 0);
  ASSERT_TRUE(store_->Pin(Id(0), 1).ok());
  ASSERT_TRUE(store_->Pin(Id(0), 1).ok());
  ASSERT_TRUE(store_->Pin(Id(0), 2).ok());
  ASSERT_TRUE(store_->CreateObject(Id(1), 1000, 1).ok());  // client 1, unsealed
  ASSERT_TRUE(store_->CreateObject(Id(2), 1000, 2).ok());  // client 2, unsealed
  EXPECT_EQ(Info(Id(0))->num_pins, 3u);

  store_->DisconnectClient(1);
  EXPECT_EQ(Info(Id(0))->num_pins, 1u);
  EXPECT_FALSE(Info(Id(1)).has_value());
  EXPECT_EQ(StateOf(Id(2)), ObjectState::kUnsealed);
  EXPECT_EQ(store_->stats().used_bytes, 2048u);

  store_->Delete(Id(0));  // pinned by client 2: pending
  store_->DisconnectClient(2);
  EXPECT_TRUE(store_->List().empty());
  EXPECT_EQ(store_->stats().used_bytes, 0u);
  EXPECT_EQ(store_->stats().pinned_bytes, 0u);
}

TEST_F(ObjectStoreTest, CreateValidatesOptions) {
  ObjectStore::Options empty;
  empty.capacity_bytes = 0;
  EXPECT_EQ(ObjectStore::Create(empty).status().code(), absl::StatusCode::kInvalidArgument);
  ObjectStore::Options missing;
  missing.capacity_bytes = 4096;
  missing.spill_dir = spill_dir_ + "/missing";
  EXPECT_EQ(ObjectStore::Create(missing).status().code(), absl::StatusCode::kInvalidArgument);
  ObjectStore::Options odd_size;
  odd_size.capacity_bytes = 1000;
  absl::StatusOr<std::unique_ptr<ObjectStore>> odd = ObjectStore::Create(odd_size);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ((*odd)->stats().capacity_bytes, static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
}

}  // namespace
}  // namespace raio::node
