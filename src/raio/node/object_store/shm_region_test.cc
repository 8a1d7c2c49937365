#include "raio/node/object_store/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "raio/testkit/time_scale.h"

namespace raio::node {
namespace {

TEST(ShmRegionTest, PrefaultsTheWholeRegionInTheBackground) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<std::unique_ptr<ShmRegion>> r =
      ShmRegion::Create(8ull << 20, /*prefault=*/true, /*chunk=*/1ull << 20);
  ASSERT_TRUE(r.ok()) << r.status();
  ShmRegion& region = **r;
  const auto deadline =
      std::chrono::steady_clock::now() + testkit::Scaled(std::chrono::seconds(30));
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
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create(1ull << 20, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->prefault_done());
  EXPECT_EQ((*r)->prefaulted_bytes(), 0u);
  std::vector<unsigned char> resident((*r)->size() / page);
  ASSERT_EQ(mincore((*r)->base(), (*r)->size(), resident.data()), 0);
  int n = 0;
  for (unsigned char v : resident) n += v & 1;
  EXPECT_EQ(n, 0);
}

TEST(ShmRegionTest, IsAnUnnamedSealedMemoryFileOfWholePages) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create(page + 1, false);
  ASSERT_TRUE(r.ok()) << r.status();
  const int fd = (*r)->fd();
  EXPECT_EQ((*r)->size(), 2 * page);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 2 * page);
  // A memory file: no name in any file system, only /proc's description of the fd.
  char link[256] = {};
  ASSERT_GT(readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1), 0);
  EXPECT_EQ(std::string(link).rfind("/memfd:raio-object-store", 0), 0u) << link;
  // Not inherited across exec by the node's workers; they receive it on connecting.
  EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  // Sealed: no holder of the descriptor can resize it under the others' mappings.
  EXPECT_EQ(fcntl(fd, F_GET_SEALS), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(ftruncate(fd, static_cast<off_t>(page)), 0);
  EXPECT_NE(ftruncate(fd, static_cast<off_t>(4 * page)), 0);
}

TEST(ShmRegionTest, AMappingOfTheDescriptorSeesTheRegionsBytes) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create(1ull << 20, false);
  ASSERT_TRUE(r.ok()) << r.status();
  ShmRegion& region = **r;
  int fd = dup(region.fd());  // as a client holds the copy it received
  ASSERT_GE(fd, 0);
  void* m = mmap(nullptr, region.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(m, MAP_FAILED);
  auto* client = static_cast<uint8_t*>(m);
  client[12345] = 0x5a;
  EXPECT_EQ(region.base()[12345], 0x5a);
  region.base()[777] = 0xa5;
  EXPECT_EQ(client[777], 0xa5);
  // The client's mapping outlives the region (a driver still holding views).
  r->reset();
  EXPECT_EQ(client[12345], 0x5a);
  munmap(m, 1ull << 20);
}

TEST(ShmRegionTest, CreateReportsBadArguments) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> zero = ShmRegion::Create(0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  // More than the machine's memory fails up front.
  absl::StatusOr<std::unique_ptr<ShmRegion>> huge = ShmRegion::Create(1ull << 60);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
}

}  // namespace
}  // namespace raio::node
