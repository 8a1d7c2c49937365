#include <sys/stat.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "raio/node/object_store/object_store.h"
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

TEST_F(ObjectStoreTest, FullStoreEvictsSecondaryCopiesBeforeSpillingAndForgetsThem) {
  // Object 0 is primary and least recently used; object 1 a secondary copy.
  PutSealed(Id(0), kQuarter, 0);
  absl::StatusOr<ObjectLocation> copy =
      store_->CreateObject(Id(1), kQuarter, 1, CopyKind::kSecondary);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_TRUE(store_->Seal(Id(1)).ok());
  store_->Unpin(Id(1), 1);
  PutSealed(Id(2), kQuarter, 2);
  PutSealed(Id(3), kQuarter, 3);
  EXPECT_EQ(store_->stats().num_evictable, 1u);

  absl::StatusOr<ObjectLocation> fresh = store_->CreateObject(Id(10), kQuarter, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->offset, copy->offset);
  EXPECT_FALSE(store_->StateOf(Id(1)).has_value());  // forgotten, not spilled
  EXPECT_EQ(StateOf(Id(0)), ObjectState::kSealed);
  EXPECT_TRUE(ListDir(spill_dir_).empty());
}

TEST_F(ObjectStoreTest, FullStoreSpillsLeastRecentlyUsedAndRestoresBytesIntact) {
  std::vector<ObjectLocation> locs;
  for (uint32_t i = 0; i < 4; ++i) locs.push_back(PutSealed(Id(i), kQuarter, i));
  // Use object 0 again: the least recently used is now object 1.
  ASSERT_TRUE(store_->Pin(Id(0), 2).ok());
  store_->Unpin(Id(0), 2);

  absl::StatusOr<ObjectLocation> fresh = store_->CreateObject(Id(10), kQuarter, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->offset, locs[1].offset);
  EXPECT_EQ(StateOf(Id(1)), ObjectState::kSpilled);
  EXPECT_EQ(StateOf(Id(0)), ObjectState::kSealed);
  EXPECT_EQ(StateOf(Id(2)), ObjectState::kSealed);
  EXPECT_EQ(ListDir(spill_dir_), std::vector<std::string>{Id(1).Hex()});
  struct stat st {};
  ASSERT_EQ(stat((spill_dir_ + "/" + Id(1).Hex()).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kQuarter);
  ObjectStoreStats s = store_->stats();
  EXPECT_EQ(s.num_spilled, 1u);
  EXPECT_EQ(s.spilled_bytes, kQuarter);
  EXPECT_EQ(s.num_objects, 5u);

  // Overwrite object 1's old memory, then bring it back: its bytes come from disk.
  Fill(*store_, *fresh, 99);
  ASSERT_TRUE(store_->Seal(Id(10)).ok());
  store_->Unpin(Id(10), 1);
  absl::StatusOr<ObjectLocation> back = store_->Pin(Id(1), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size, kQuarter);
  EXPECT_EQ(back->offset, locs[2].offset);  // object 2 was now the least recently used
  EXPECT_TRUE(Matches(*store_, *back, 1));
  EXPECT_EQ(StateOf(Id(2)), ObjectState::kSpilled);
  EXPECT_EQ(StateOf(Id(1)), ObjectState::kSealed);
  EXPECT_TRUE(Info(Id(1))->has_spill_file);
  EXPECT_TRUE(Matches(*store_, locs[0], 0));
  EXPECT_TRUE(Matches(*store_, locs[3], 3));
  EXPECT_TRUE(Matches(*store_, *fresh, 99));
  s = store_->stats();
  EXPECT_EQ(s.num_spilled, 1u);
  EXPECT_EQ(s.num_evictable, 0u);  // object 1 is pinned
  EXPECT_EQ(s.pinned_bytes, kQuarter);
}

TEST_F(ObjectStoreTest, EvictsRestoredCopiesBeforeSpillingAnything) {
  for (uint32_t i = 0; i < 4; ++i) PutSealed(Id(i), kQuarter, i);
  PutSealed(Id(10), kQuarter, 10);  // spills object 0
  ASSERT_EQ(StateOf(Id(0)), ObjectState::kSpilled);
  absl::StatusOr<ObjectLocation> restored = store_->Pin(Id(0), 2);  // spills object 1
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_TRUE(Matches(*store_, *restored, 0));
  store_->Unpin(Id(0), 2);
  EXPECT_EQ(store_->stats().num_evictable, 1u);
  EXPECT_EQ(ListDir(spill_dir_), (std::vector<std::string>{Id(0).Hex(), Id(1).Hex()}));

  // Object 0 is the most recently used, yet it goes first: dropping it costs no I/O.
  absl::StatusOr<ObjectLocation> next = store_->CreateObject(Id(11), kQuarter, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->offset, restored->offset);
  EXPECT_EQ(StateOf(Id(0)), ObjectState::kSpilled);
  EXPECT_EQ(StateOf(Id(2)), ObjectState::kSealed);
  EXPECT_EQ(ListDir(spill_dir_), (std::vector<std::string>{Id(0).Hex(), Id(1).Hex()}));
  ObjectStoreStats s = store_->stats();
  EXPECT_EQ(s.num_evictable, 0u);
  EXPECT_EQ(s.num_spilled, 2u);

  // Its spill file still holds the bytes.
  Fill(*store_, *next, 11);
  ASSERT_TRUE(store_->Seal(Id(11)).ok());
  store_->Unpin(Id(11), 1);
  absl::StatusOr<ObjectLocation> again = store_->Pin(Id(0), 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Matches(*store_, *again, 0));
}

TEST_F(ObjectStoreTest, NeverSpillsPinnedOrUnsealedObjects) {
  PutSealed(Id(0), kQuarter, 0);
  ASSERT_TRUE(store_->Pin(Id(0), 2).ok());                     // sealed, pinned
  ASSERT_TRUE(store_->CreateObject(Id(1), kQuarter, 1).ok());  // unsealed
  PutSealed(Id(2), kQuarter, 2);                               // sealed, unpinned
  PutSealed(Id(3), kQuarter, 3);
  ASSERT_TRUE(store_->Pin(Id(3), 2).ok());
  ASSERT_TRUE(store_->Pin(Id(3), 2).ok());  // pinned twice
  store_->Unpin(Id(3), 2);                  // still pinned once

  ASSERT_TRUE(store_->CreateObject(Id(10), kQuarter, 1).ok());
  EXPECT_EQ(StateOf(Id(2)), ObjectState::kSpilled);

  absl::StatusOr<ObjectLocation> more = store_->CreateObject(Id(11), kQuarter, 1);
  ASSERT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(more.status().message());
  EXPECT_NE(msg.find("needs 262144 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("capacity 1048576 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 bytes in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 bytes pinned"), std::string::npos) << msg;
  EXPECT_EQ(StateOf(Id(0)), ObjectState::kSealed);
  EXPECT_EQ(StateOf(Id(1)), ObjectState::kUnsealed);
  EXPECT_EQ(StateOf(Id(3)), ObjectState::kSealed);
  EXPECT_EQ(ListDir(spill_dir_), std::vector<std::string>{Id(2).Hex()});
  EXPECT_FALSE(Info(Id(11)).has_value());
}

TEST_F(ObjectStoreTest, ObjectLargerThanCapacityFailsNamingTheSizesAndSpillsNothing) {
  PutSealed(Id(0), 1000, 0);
  absl::StatusOr<ObjectLocation> big = store_->CreateObject(Id(1), 2 * kCapacity, 1);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(big.status().message());
  EXPECT_NE(msg.find(Id(1).Hex()), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 2097152 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("capacity 1048576 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1024 bytes in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0 bytes pinned"), std::string::npos) << msg;
  EXPECT_EQ(StateOf(Id(0)), ObjectState::kSealed);
  EXPECT_TRUE(ListDir(spill_dir_).empty());
  EXPECT_EQ(store_->stats().num_objects, 1u);
}

TEST_F(ObjectStoreTest, DeleteRemovesSpillFiles) {
  for (uint32_t i = 0; i < 4; ++i) PutSealed(Id(i), kQuarter, i);
  PutSealed(Id(10), kQuarter, 10);          // spills 0
  PutSealed(Id(11), kQuarter, 11);          // spills 1
  ASSERT_TRUE(store_->Pin(Id(1), 2).ok());  // restored copy, spills 2
  EXPECT_EQ(ListDir(spill_dir_).size(), 3u);
  store_->Delete(Id(0));  // spilled
  EXPECT_EQ(ListDir(spill_dir_), (std::vector<std::string>{Id(1).Hex(), Id(2).Hex()}));
  store_->Delete(Id(1));  // restored copy, pinned: file stays until the last Unpin
  EXPECT_EQ(ListDir(spill_dir_).size(), 2u);
  store_->Unpin(Id(1), 2);
  EXPECT_EQ(ListDir(spill_dir_), std::vector<std::string>{Id(2).Hex()});
  store_->Delete(Id(2));
  EXPECT_TRUE(ListDir(spill_dir_).empty());
  EXPECT_EQ(store_->stats().num_spilled, 0u);
  EXPECT_EQ(store_->stats().num_objects, 3u);
}

TEST_F(ObjectStoreTest, DestructorRemovesSpillFilesAndClosesTheMemory) {
  const int fd = store_->shm_fd();
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kCapacity);
  for (uint32_t i = 0; i < 6; ++i) PutSealed(Id(i), kQuarter, i);
  EXPECT_EQ(ListDir(spill_dir_).size(), 2u);
  store_.reset();
  EXPECT_TRUE(ListDir(spill_dir_).empty());
  // The descriptor is closed (nothing else in this test opened a file meanwhile).
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
}

}  // namespace
}  // namespace raio::node
