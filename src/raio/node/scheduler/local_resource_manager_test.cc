#include "raio/node/scheduler/local_resource_manager.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace raio::node {
namespace {

ResourceSet Make(const std::map<std::string, double>& m) {
  absl::StatusOr<ResourceSet> r = ResourceSet::FromMap(m);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ResourceSet();
}

TEST(LocalResourceManagerTest, AllocatesUntilFullThenRefuses) {
  LocalResourceManager m(Make({{"CPU", 4}}));
  std::vector<Allocation> held;
  for (int i = 0; i < 4; ++i) {
    std::optional<Allocation> a = m.TryAllocate(Make({{"CPU", 1}}));
    ASSERT_TRUE(a.has_value()) << "allocation " << i;
    EXPECT_EQ(a->resources, Make({{"CPU", 1}}));
    held.push_back(*a);
  }
  EXPECT_EQ(m.available().GetFixed("CPU"), 0);
  EXPECT_FALSE(m.TryAllocate(Make({{"CPU", 1}})).has_value());
  EXPECT_FALSE(m.TryAllocate(Make({{"CPU", 0.5}})).has_value());
  // A refused allocation takes nothing.
  EXPECT_EQ(m.available().GetFixed("CPU"), 0);
  EXPECT_EQ(m.total(), Make({{"CPU", 4}}));
}

TEST(LocalResourceManagerTest, ReleaseReturnsResources) {
  LocalResourceManager m(Make({{"CPU", 2}, {"memory", 1000}}));
  std::optional<Allocation> a = m.TryAllocate(Make({{"CPU", 2}, {"memory", 600}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(m.available(), Make({{"memory", 400}}));
  EXPECT_FALSE(m.TryAllocate(Make({{"CPU", 1}})).has_value());
  m.Release(*a);
  EXPECT_EQ(m.available(), m.total());
  EXPECT_TRUE(m.TryAllocate(Make({{"CPU", 1}, {"memory", 1000}})).has_value());
}

TEST(LocalResourceManagerTest, FractionalGpuSharesPackOntoOneDeviceBestFit) {
  LocalResourceManager m(Make({{"GPU", 2}}));
  ASSERT_EQ(m.num_gpus(), 2);
  std::optional<Allocation> a = m.TryAllocate(Make({{"GPU", 0.5}}));
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->GpuIds().size(), 1u);
  int first = a->GpuIds()[0];
  EXPECT_EQ(a->gpu_shares[0].second, ResourceSet::kScale / 2);

  // Best fit: the partly used device has the least room that still fits.
  std::optional<Allocation> b = m.TryAllocate(Make({{"GPU", 0.25}}));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->GpuIds(), std::vector<int>{first});
  std::optional<Allocation> c = m.TryAllocate(Make({{"GPU", 0.25}}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->GpuIds(), std::vector<int>{first});

  // The first device is full now; the next share goes to the other one.
  std::optional<Allocation> d = m.TryAllocate(Make({{"GPU", 0.5}}));
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->GpuIds().size(), 1u);
  EXPECT_NE(d->GpuIds()[0], first);

  // A whole GPU cannot be assembled from two half-free devices.
  m.Release(*b);
  m.Release(*c);
  EXPECT_EQ(m.available().GetFixed("GPU"), ResourceSet::kScale);
  EXPECT_FALSE(m.TryAllocate(Make({{"GPU", 1}})).has_value());
  EXPECT_EQ(m.available().GetFixed("GPU"), ResourceSet::kScale);
}

TEST(LocalResourceManagerTest, WholeGpuDemandsTakeDistinctIds) {
  LocalResourceManager m(Make({{"GPU", 4}}));
  std::optional<Allocation> a = m.TryAllocate(Make({{"GPU", 2}}));
  ASSERT_TRUE(a.has_value());
  std::optional<Allocation> b = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(b.has_value());
  std::optional<Allocation> c = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(m.TryAllocate(Make({{"GPU", 1}})).has_value());

  std::vector<int> ids = a->GpuIds();
  ASSERT_EQ(ids.size(), 2u);
  for (const Allocation* x : {&*b, &*c}) {
    std::vector<int> more = x->GpuIds();
    ASSERT_EQ(more.size(), 1u);
    ids.push_back(more[0]);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3}));
  for (const auto& [id, share] : a->gpu_shares) EXPECT_EQ(share, ResourceSet::kScale);

  // Released ids are handed out again.
  m.Release(*b);
  std::optional<Allocation> d = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->GpuIds(), b->GpuIds());
}

TEST(LocalResourceManagerTest, FractionalGpuAboveOneIsInfeasible) {
  LocalResourceManager m(Make({{"GPU", 4}}));
  absl::Status s = m.CheckFeasible(Make({{"GPU", 1.5}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(m.CheckFeasible(Make({{"GPU", 0.5}})).ok());
  EXPECT_TRUE(m.CheckFeasible(Make({{"GPU", 1}})).ok());
  EXPECT_TRUE(m.CheckFeasible(Make({{"GPU", 3}})).ok());
}

TEST(LocalResourceManagerTest, DemandAboveTotalIsInfeasible) {
  LocalResourceManager m(Make({{"CPU", 4}, {"GPU", 1}}));
  absl::Status cpu = m.CheckFeasible(Make({{"CPU", 5}}));
  EXPECT_EQ(cpu.code(), absl::StatusCode::kResourceExhausted) << cpu;
  EXPECT_NE(cpu.message().find("CPU: 5"), std::string_view::npos) << cpu;
  EXPECT_EQ(m.CheckFeasible(Make({{"GPU", 2}})).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.CheckFeasible(Make({{"custom", 1}})).code(), absl::StatusCode::kResourceExhausted);
  // Feasibility ignores current use.
  ASSERT_TRUE(m.TryAllocate(Make({{"CPU", 4}})).has_value());
  EXPECT_TRUE(m.CheckFeasible(Make({{"CPU", 4}, {"GPU", 1}})).ok());
}

TEST(LocalResourceManagerTest, LendAndReclaimCpu) {
  LocalResourceManager m(Make({{"CPU", 2}, {"GPU", 1}}));
  std::optional<Allocation> a = m.TryAllocate(Make({{"CPU", 2}, {"GPU", 1}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(m.TryAllocate(Make({{"CPU", 1}})).has_value());

  m.LendCpu(*a);
  EXPECT_TRUE(a->cpu_lent);
  EXPECT_EQ(m.available().GetFixed("CPU"), 2 * ResourceSet::kScale);
  EXPECT_EQ(m.available().GetFixed("GPU"), 0);  // only CPUs are lent
  m.LendCpu(*a);                                // idempotent
  EXPECT_EQ(m.available().GetFixed("CPU"), 2 * ResourceSet::kScale);

  std::optional<Allocation> b = m.TryAllocate(Make({{"CPU", 1}}));
  ASSERT_TRUE(b.has_value());

  // Reclaiming over-commits until the other task finishes.
  m.ReclaimCpu(*a);
  EXPECT_FALSE(a->cpu_lent);
  EXPECT_EQ(m.available().GetFixed("CPU"), -1 * ResourceSet::kScale);
  m.ReclaimCpu(*a);  // idempotent
  EXPECT_EQ(m.available().GetFixed("CPU"), -1 * ResourceSet::kScale);
  m.Release(*b);
  m.Release(*a);
  EXPECT_EQ(m.available(), m.total());
}

TEST(LocalResourceManagerTest, ReleaseWhileCpuLentDoesNotReturnCpuTwice) {
  LocalResourceManager m(Make({{"CPU", 2}}));
  std::optional<Allocation> a = m.TryAllocate(Make({{"CPU", 2}}));
  ASSERT_TRUE(a.has_value());
  m.LendCpu(*a);
  m.Release(*a);
  EXPECT_EQ(m.available(), m.total());
}

}  // namespace
}  // namespace raio::node
