// StoreClient's mapping of the descriptor its node passed: what it accepts and the clear
// errors for what it does not (no node is needed for these).
#include "raio/worker/store_client.h"

#include <sys/mman.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "raio/node/object_store/shm_region.h"

namespace raio::worker {
namespace {

TEST(StoreClientTest, MapsTheStoresDescriptor) {
  absl::StatusOr<std::unique_ptr<node::ShmRegion>> region =
      node::ShmRegion::Create(1 << 20, /*prefault=*/false);
  ASSERT_TRUE(region.ok()) << region.status();
  // As received over the node socket: a descriptor of its own for the same memory.
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Create(nullptr, UniqueFd(::dup((*region)->fd())), (*region)->size());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->max_object_bytes(), (1u << 20) - StoreClient::kHeaderBytes);
}

TEST(StoreClientTest, NoDescriptorIsAClearError) {
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Create(nullptr, UniqueFd(), 1 << 20);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
  EXPECT_NE(client.status().message().find("no object store descriptor"), std::string::npos)
      << client.status();
}

TEST(StoreClientTest, ADescriptorThatIsNotAFileIsRefused) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd write_end(fds[1]);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Create(nullptr, UniqueFd(fds[0]), 1 << 20);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
  EXPECT_NE(client.status().message().find("not a file"), std::string::npos) << client.status();
}

TEST(StoreClientTest, AFileSmallerThanTheStoreIsRefusedRatherThanMappedPastItsEnd) {
  UniqueFd small(::memfd_create("store-client-test", MFD_CLOEXEC));
  ASSERT_TRUE(small.valid());
  ASSERT_EQ(::ftruncate(small.get(), 4096), 0);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Create(nullptr, std::move(small), 1 << 20);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
  EXPECT_NE(client.status().message().find("1048576 bytes, got one of 4096 bytes"),
            std::string::npos)
      << client.status();
}

TEST(StoreClientTest, SizeZeroIsRefused) {
  UniqueFd file(::memfd_create("store-client-test", MFD_CLOEXEC));
  ASSERT_TRUE(file.valid());
  EXPECT_EQ(StoreClient::Create(nullptr, std::move(file), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace raio::worker
