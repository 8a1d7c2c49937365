#include "raio/node/object_store/shm_region.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace raio::node {
namespace {

bool FileExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

TEST(ShmRegionTest, PrefaultsTheWholeRegionInTheBackground) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<std::unique_ptr<ShmRegion>> r =
      ShmRegion::Create("/dev/shm", 8ull << 20, /*prefault=*/true, /*chunk=*/1ull << 20);
  ASSERT_TRUE(r.ok()) << r.status();
  ShmRegion& region = **r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!region.prefault_done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling, with a deadline
  }
  ASSERT_TRUE(region.prefault_done());
  EXPECT_EQ(region.prefaulted_bytes(), 8ull << 20);
  // Every page is now in memory (tmpfs page cache), so clients' first touches are
  // cheap minor faults.
  std::vector<unsigned char> resident(region.size() / page);
  ASSERT_EQ(mincore(region.base(), region.size(), resident.data()), 0);
  for (std::size_t i = 0; i < resident.size(); ++i) {
    ASSERT_TRUE(resident[i] & 1) << "page " << i;
  }
  // The memory is zeroed: pre-faulting writes nothing visible.
  for (uint64_t off = 0; off < region.size(); off += page) ASSERT_EQ(region.base()[off], 0);
}

TEST(ShmRegionTest, WithoutPrefaultNothingIsTouched) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create("/dev/shm", 1ull << 20, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->prefault_done());
  EXPECT_EQ((*r)->prefaulted_bytes(), 0u);
  std::vector<unsigned char> resident((*r)->size() / page);
  ASSERT_EQ(mincore((*r)->base(), (*r)->size(), resident.data()), 0);
  int n = 0;
  for (unsigned char v : resident) n += v & 1;
  EXPECT_EQ(n, 0);
}

TEST(ShmRegionTest, FileIsNamedSizedAndRemovedWithTheRegion) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create("/dev/shm", page + 1, false);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string path = (*r)->path();
  // raio-store-<pid>-<start ticks>-<pid namespace>-XXXXXX (store_files_test checks the parts).
  EXPECT_EQ(path.rfind("/dev/shm/raio-store-" + std::to_string(getpid()) + "-", 0), 0u) << path;
  EXPECT_EQ((*r)->size(), 2 * page);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 2 * page);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  r->reset();
  EXPECT_FALSE(FileExists(path));
}

TEST(ShmRegionTest, CreateReportsBadArguments) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> zero = ShmRegion::Create("/dev/shm", 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ShmRegion>> missing =
      ShmRegion::Create("/nonexistent-raio-dir", 4096);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(missing.status().message().find("No such file or directory"), std::string::npos)
      << missing.status();
  // More than the tmpfs holds fails up front instead of SIGBUS on first touch.
  absl::StatusOr<std::unique_ptr<ShmRegion>> huge = ShmRegion::Create("/dev/shm", 1ull << 60);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
}

}  // namespace
}  // namespace raio::node
