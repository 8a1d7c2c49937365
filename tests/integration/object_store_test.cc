// Integration tests of the shared-memory object store on the embedded cluster: large
// values through the store, zero-copy views, spilling, full-store errors, and that
// objects are freed when their last reference goes.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

constexpr int64_t kMiB = 1 << 20;

// Whether `p` lies in a mapping of a raio object store (/proc/self/maps shows the
// memory file as "/memfd:raio-object-store (deleted)").
bool InStoreMapping(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    if (line.find("/memfd:raio-object-store") == std::string::npos) continue;
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) return true;
  }
  return false;
}

// Polls until `pred` holds or Scaled(10 s) pass (object deletes are one-way messages).
template <typename Pred>
bool Eventually(Pred pred) {
  return WaitFor(pred, 10s);
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.object_store_memory_bytes = 64 * kMiB;
    raio::Init(options);
  }
  void TearDown() override { raio::Shutdown(); }
};

TEST_F(ObjectStoreTest, LargePutGetRoundTripsThroughTheStore) {
  std::vector<uint8_t> bytes = MakeBytes(10 * kMiB, 1);
  auto ref = raio::Put(bytes);
  EXPECT_EQ(raio::internal::GetObjectStats().store_objects, 1u);
  std::vector<uint8_t> back = ref.Get();
  EXPECT_EQ(Checksum(back), Checksum(bytes));
  raio::ArrayView<uint8_t> view = ref.GetView();
  ASSERT_EQ(view.size(), bytes.size());
  EXPECT_TRUE(InStoreMapping(view.data())) << "the view was copied, not mapped";
  EXPECT_EQ(ChecksumBytes(view.data(), view.size()), Checksum(bytes));
  // Small values stay inline in this process.
  auto small = raio::Put(std::vector<uint8_t>(1000, 7));
  EXPECT_EQ(raio::internal::GetObjectStats().store_objects, 1u);
  EXPECT_FALSE(InStoreMapping(small.GetView().data()));
}

TEST_F(ObjectStoreTest, LargeResultsAndArgumentsAreReadInPlace) {
  auto made = raio::Task(MakeBytes).Remote(5 * kMiB, 2);  // 5 MiB result -> store
  uint64_t expected = Checksum(MakeBytes(5 * kMiB, 2));
  EXPECT_EQ(raio::Task(Checksum).Remote(made).Get(), expected);
  EXPECT_TRUE(InStoreMapping(made.GetView().data()));
  EXPECT_EQ(Checksum(made.Get()), expected);
  // A large by-value argument goes through the store too.
  EXPECT_EQ(raio::Task(Checksum).Remote(MakeBytes(3 * kMiB, 3)).Get(),
            Checksum(MakeBytes(3 * kMiB, 3)));
  // Arrays of doubles and lists of large objects.
  std::vector<raio::ObjectRef<std::vector<double>>> parts;
  for (int i = 0; i < 3; ++i) parts.push_back(raio::Task(MakeArray).Remote(200000, 1.0));
  EXPECT_EQ(raio::Task(CountElements).Remote(parts).Get(), 600000);
  EXPECT_DOUBLE_EQ(raio::Task(SumArray).Remote(parts[0]).Get(), 199999.0 * 200000.0 / 2);
}

TEST_F(ObjectStoreTest, BuffersAreRawBytes) {
  std::vector<uint8_t> bytes = MakeBytes(2 * kMiB, 4);
  auto ref = raio::Put(raio::Buffer::Copy(bytes.data(), bytes.size()));
  raio::Buffer view = ref.Get();
  EXPECT_TRUE(InStoreMapping(view.data()));
  EXPECT_EQ(ChecksumBytes(view.data(), view.size()), Checksum(bytes));
  EXPECT_EQ(raio::Task(ChecksumBuffer).Remote(ref).Get(), Checksum(bytes));
  // A Buffer is not an array of doubles.
  EXPECT_THROW(raio::ObjectRef<std::vector<double>>(ref.ID(), {}).Get(), raio::SerializationError);
  raio::internal::AddLocalReference(ref.ID());  // balance the adopting ref above
}

TEST_F(ObjectStoreTest, ManyWorkersReadOneObjectAtOnce) {
  std::vector<uint8_t> bytes = MakeBytes(20 * kMiB, 5);
  uint64_t expected = Checksum(bytes);
  auto ref = raio::Put(bytes);
  std::vector<raio::ObjectRef<uint64_t>> sums;
  for (int i = 0; i < 8; ++i) sums.push_back(raio::Task(Checksum).Remote(ref));
  for (uint64_t s : raio::Get(sums)) EXPECT_EQ(s, expected);
  auto [ready, pending] = raio::Wait(sums, 8, Scaled(10s));
  EXPECT_EQ(ready.size(), 8u);
}

TEST_F(ObjectStoreTest, ObjectsBeyondFreeMemorySpillAndComeBackIntact) {
  std::vector<raio::ObjectRef<std::vector<uint8_t>>> refs;
  std::vector<uint64_t> sums;
  for (int i = 0; i < 4; ++i) {  // 4 x 24 MiB > 64 MiB store
    auto bytes = MakeBytes(24 * kMiB, 10 + i);
    sums.push_back(Checksum(bytes));
    refs.push_back(raio::Put(bytes));
  }
  EXPECT_GT(raio::internal::GetObjectStats().store_spilled_objects, 0u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ChecksumBytes(refs[i].GetView().data(), refs[i].GetView().size()), sums[i]) << i;
  }
  // A worker reads a spilled object too.
  EXPECT_EQ(raio::Task(Checksum).Remote(refs[0]).Get(), sums[0]);
}

TEST_F(ObjectStoreTest, PutLargerThanTheStoreFailsWithSizes) {
  try {
    raio::Put(std::vector<uint8_t>(100 * kMiB));
    FAIL() << "expected ObjectStoreFullError";
  } catch (const raio::ObjectStoreFullError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("104857"), std::string::npos) << msg;  // the requested size
    EXPECT_NE(msg.find("capacity"), std::string::npos) << msg;
  }
  // The cluster keeps working.
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(), 3);
}

TEST_F(ObjectStoreTest, TenThousandTasksPassingObjectsLeaveNothingBehind) {
  {
    auto big = raio::Put(MakeBytes(1 * kMiB, 6));
    std::vector<raio::ObjectRef<int>> refs;
    for (int i = 0; i < 10000; ++i) {
      auto sq = raio::Task(Square).Remote(i % 100);
      refs.push_back(raio::Task(Add).Remote(sq, 1));
      if (i % 1000 == 0) {
        auto made = raio::Task(MakeBytes).Remote(200 * 1024, i);
        raio::Task(Checksum).Remote(made).Get();
        raio::Task(Checksum).Remote(big).Get();
      }
    }
    for (int i = 0; i < 10000; ++i) ASSERT_EQ(refs[i].Get(), (i % 100) * (i % 100) + 1);
  }
  EXPECT_TRUE(Eventually([] {
    auto s = raio::internal::GetObjectStats();
    return s.owned_objects == 0 && s.store_objects == 0 && s.store_used_bytes == 0;
  })) << "owned "
      << raio::internal::GetObjectStats().owned_objects << ", in store "
      << raio::internal::GetObjectStats().store_objects;
}

TEST_F(ObjectStoreTest, RefsNestedInAPutKeepTheirObjectsAlive) {
  uint64_t expected = Checksum(MakeBytes(2 * kMiB, 7));
  raio::ObjectRef<std::vector<BytesRef>> outer;
  {
    BytesRef inner = raio::Put(MakeBytes(2 * kMiB, 7));
    outer = raio::Put(std::vector<BytesRef>{inner});
  }  // the only direct reference to inner is gone; outer still holds it
  std::vector<BytesRef> got = outer.Get();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Checksum(got[0].Get()), expected);
  // A worker borrows the nested refs through a by-value argument.
  EXPECT_EQ(raio::Task(ChecksumAll).Remote(got).Get(), expected);
  got.clear();
  outer = {};
  EXPECT_TRUE(Eventually([] {
    auto s = raio::internal::GetObjectStats();
    return s.owned_objects == 0 && s.store_objects == 0;
  }));
}

TEST_F(ObjectStoreTest, RefsReturnedByTasksAreBorrowedAndFreedAtTheEnd) {
  uint64_t expected = 0;
  for (int i = 0; i < 3; ++i) expected = expected * 31 + Checksum(MakeBytes(kMiB, 100 + i));
  {
    // The worker owns three 1 MiB objects; the driver borrows them through the result.
    std::vector<BytesRef> refs = raio::Task(MakeRefs).Remote(3, kMiB).Get();
    ASSERT_EQ(refs.size(), 3u);
    uint64_t h = 0;
    for (const auto& r : refs) h = h * 31 + Checksum(r.Get());
    EXPECT_EQ(h, expected);
    EXPECT_EQ(raio::Task(ChecksumAll).Remote(refs).Get(), expected);
    EXPECT_EQ(raio::internal::GetObjectStats().store_objects, 3u);
    // A small object owned by a worker, fetched from its owner.
    raio::ObjectRef<int> small = raio::Task(MakeSmallRef).Remote(41).Get();
    EXPECT_EQ(small.Get(), 41);
    EXPECT_EQ(raio::Task(Add).Remote(small, 1).Get(), 42);
  }
  EXPECT_TRUE(Eventually([] {
    auto s = raio::internal::GetObjectStats();
    return s.owned_objects == 0 && s.store_objects == 0;
  })) << raio::internal::GetObjectStats().store_objects;
}

TEST_F(ObjectStoreTest, ARefReturnedToItsOwnerKeepsCounting) {
  {
    BytesRef mine = raio::Put(MakeBytes(kMiB, 9));
    BytesRef echoed = raio::Task(EchoRef).Remote(mine).Get();
    EXPECT_EQ(echoed.ID(), mine.ID());
    mine = {};
    EXPECT_EQ(Checksum(echoed.Get()), Checksum(MakeBytes(kMiB, 9)));
  }
  EXPECT_TRUE(Eventually([] {
    auto s = raio::internal::GetObjectStats();
    return s.owned_objects == 0 && s.store_objects == 0;
  }));
}

TEST_F(ObjectStoreTest, ADeadBorrowerDoesNotKeepAnObjectAlive) {
  std::string pid_file = "/tmp/raio-holdref-" + std::to_string(getpid());
  std::remove(pid_file.c_str());
  {
    BytesRef ref = raio::Put(MakeBytes(2 * kMiB, 12));
    // Held far longer than the test takes to kill it.
    auto held = raio::Task(HoldRef).SetMaxRetries(0).Remote(ref, pid_file, ScaledMs(60s));
    ASSERT_TRUE(Eventually([&] { return std::ifstream(pid_file).good(); }));
    int pid = 0;
    std::ifstream(pid_file) >> pid;
    ASSERT_GT(pid, 0);
    ::kill(pid, SIGKILL);
    EXPECT_THROW(held.Get(Scaled(10s)), raio::WorkerCrashedError);
  }
  std::remove(pid_file.c_str());
  EXPECT_TRUE(Eventually([] {
    auto s = raio::internal::GetObjectStats();
    return s.owned_objects == 0 && s.store_objects == 0;
  })) << raio::internal::GetObjectStats().store_objects;
}

TEST_F(ObjectStoreTest, BorrowersOfADeadOwnerGetOwnerDiedError) {
  OwnedRef owned = raio::Task(MakeOwnedRef).Remote(5).Get();
  ASSERT_GT(owned.pid, 0);
  ::kill(owned.pid, SIGKILL);  // the worker that owns the object
  try {
    owned.ref.Get(Scaled(10s));
    FAIL() << "expected OwnerDiedError";
  } catch (const raio::OwnerDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("owner"), std::string::npos) << e.what();
  }
  // A dependent task fails the same way instead of hanging.
  EXPECT_THROW(raio::Task(Add).Remote(owned.ref, 1).Get(Scaled(10s)), raio::OwnerDiedError);
}

TEST_F(ObjectStoreTest, GetOfAnObjectWhoseOwnerIsLongGoneFailsAtOnce) {
  OwnedRef owned = raio::Task(MakeOwnedRef).Remote(6).Get();
  ASSERT_GT(owned.pid, 0);
  ::kill(owned.pid, SIGKILL);
  // Wait until the owner's process is reaped: connecting to it now fails synchronously.
  ASSERT_TRUE(WaitFor([&] { return ::kill(owned.pid, 0) != 0; }, 10s)) << "owner not reaped";
  // At once: well within a Get deadline that a wait for the owner would run past (it would
  // end in GetTimeoutError instead).
  EXPECT_THROW(owned.ref.Get(Scaled(2s)), raio::OwnerDiedError);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
