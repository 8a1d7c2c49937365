#include "raio/node/scheduler/local_resource_manager.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "raio/common/placement_resources.h"

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

// Placement group bundles: renamed resources added and removed at run time.

PlacementGroupId Pg(char c) { return PlacementGroupId::FromBinary(std::string(8, c)); }

// What a node does when bundle `index` of `pg` (resources `bundle`) is committed: holds its
// raw resources and adds the renamed ones, carrying the raw allocation's GPU instances.
struct Committed {
  Allocation raw;
  ResourceSet renamed;
  std::map<std::string, GpuShares> instances;
};
Committed Commit(LocalResourceManager& m, const ResourceSet& bundle, const PlacementGroupId& pg,
                 int index) {
  Committed c;
  std::optional<Allocation> raw = m.TryAllocate(bundle);
  EXPECT_TRUE(raw.has_value()) << "bundle " << index << " " << bundle.ToString();
  if (raw) c.raw = *raw;
  c.renamed = CommittedBundleResources(bundle, pg, index);
  if (!c.raw.gpu_shares.empty()) {
    c.instances[BundleResourceName("GPU", pg, index)] = c.raw.gpu_shares;
    c.instances[BundleResourceName("GPU", pg, std::nullopt)] = c.raw.gpu_shares;
  }
  absl::Status s = m.AddResources(c.renamed, c.instances);
  EXPECT_TRUE(s.ok()) << s;
  return c;
}
void Cancel(LocalResourceManager& m, const Committed& c) {
  m.RemoveResources(c.renamed, c.instances);
  m.Release(c.raw);
}

TEST(LocalResourceManagerTest, CommittedBundleOffersItsResourcesUnderRenamedNames) {
  LocalResourceManager m(Make({{"CPU", 4}, {"custom", 2}}));
  const PlacementGroupId pg = Pg('a');
  Committed c = Commit(m, Make({{"CPU", 2}, {"custom", 1}}), pg, 0);
  EXPECT_EQ(m.total().Get(BundleResourceName("CPU", pg, 0)), 2);
  EXPECT_EQ(m.total().Get(BundleResourceName("CPU", pg, std::nullopt)), 2);
  EXPECT_EQ(m.total().Get(BundleResourceName("custom", pg, 0)), 1);
  EXPECT_EQ(m.total().Get("CPU"), 4);      // the raw totals stay
  EXPECT_EQ(m.available().Get("CPU"), 2);  // the bundle holds two of them

  const ResourceSet in_bundle = PlacementDemand(Make({{"CPU", 1}}), pg, 0);
  EXPECT_TRUE(m.CheckFeasible(in_bundle).ok());
  std::optional<Allocation> a = m.TryAllocate(in_bundle);
  std::optional<Allocation> b = m.TryAllocate(PlacementDemand(Make({{"CPU", 1}}), pg, -1));
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(m.TryAllocate(in_bundle).has_value());  // the bundle's two CPUs are taken
  EXPECT_EQ(m.available().Get("CPU"), 2);              // not the node's others
  EXPECT_TRUE(m.TryAllocate(PlacementDemand(Make({{"custom", 1}}), pg, 0)).has_value());
  EXPECT_EQ(m.CheckFeasible(PlacementDemand(Make({{"CPU", 3}}), pg, 0)).code(),
            absl::StatusCode::kResourceExhausted);
  m.Release(*a);
  EXPECT_TRUE(m.TryAllocate(in_bundle).has_value());
}

TEST(LocalResourceManagerTest, RemovedBundleLeavesTheOriginalTotals) {
  const ResourceSet total = Make({{"CPU", 4}, {"GPU", 2}});
  LocalResourceManager m(total);
  const PlacementGroupId pg = Pg('b');
  Committed c0 = Commit(m, Make({{"CPU", 1}, {"GPU", 1}}), pg, 0);
  Committed c1 = Commit(m, Make({{"CPU", 1}}), pg, 1);
  EXPECT_EQ(m.total().Get(BundleResourceName("CPU", pg, std::nullopt)), 2);  // summed
  std::optional<Allocation> a = m.TryAllocate(PlacementDemand(Make({{"CPU", 1}}), pg, 1));
  ASSERT_TRUE(a.has_value());
  m.Release(*a);

  Cancel(m, c0);
  EXPECT_EQ(m.total().Get(BundleResourceName("CPU", pg, std::nullopt)), 1);
  EXPECT_EQ(m.total().Get(BundleResourceName("GPU", pg, 0)), 0);
  EXPECT_EQ(m.CheckFeasible(PlacementDemand(Make({{"GPU", 1}}), pg, -1)).code(),
            absl::StatusCode::kResourceExhausted);
  Cancel(m, c1);
  EXPECT_EQ(m.total(), total);
  EXPECT_EQ(m.available(), total);
  // Its GPU is whole again for plain demands.
  std::optional<Allocation> g = m.TryAllocate(Make({{"GPU", 2}}));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->GpuIds(), (std::vector<int>{0, 1}));
}

TEST(LocalResourceManagerTest, AllocationReleasedAfterItsBundleWasRemovedLeavesNoTrace) {
  const ResourceSet total = Make({{"CPU", 2}, {"GPU", 1}});
  LocalResourceManager m(total);
  const PlacementGroupId pg = Pg('c');
  Committed c = Commit(m, Make({{"CPU", 1}, {"GPU", 1}}), pg, 0);
  std::optional<Allocation> a =
      m.TryAllocate(PlacementDemand(Make({{"CPU", 1}, {"GPU", 1}}), pg, 0));
  ASSERT_TRUE(a.has_value());
  Cancel(m, c);
  m.Release(*a);
  EXPECT_EQ(m.total(), total);
  EXPECT_EQ(m.available(), total);
  std::optional<Allocation> g = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->GpuIds(), std::vector<int>{0});
}

TEST(LocalResourceManagerTest, GpuBundleHandsOutExactlyItsOwnGpu) {
  LocalResourceManager m(Make({{"GPU", 4}}));
  const PlacementGroupId pg = Pg('d');
  std::optional<Allocation> plain = m.TryAllocate(Make({{"GPU", 1}}));  // takes GPU 0
  ASSERT_TRUE(plain.has_value());
  ASSERT_EQ(plain->GpuIds(), std::vector<int>{0});
  Committed c = Commit(m, Make({{"GPU", 2}}), pg, 0);
  ASSERT_EQ(c.raw.GpuIds(), (std::vector<int>{1, 2}));

  // Indexed and wildcard names together: the same GPU from both, listed once.
  const ResourceSet one = PlacementDemand(Make({{"GPU", 1}}), pg, 0);
  std::optional<Allocation> a = m.TryAllocate(one);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->GpuIds(), std::vector<int>{1});
  EXPECT_EQ(a->bundle_gpu_shares.size(), 2u);
  EXPECT_TRUE(a->gpu_shares.empty());
  std::optional<Allocation> b = m.TryAllocate(one);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->GpuIds(), std::vector<int>{2});
  EXPECT_FALSE(m.TryAllocate(one).has_value());
  // The plain GPU left is the node's fourth.
  std::optional<Allocation> rest = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(rest->GpuIds(), std::vector<int>{3});

  m.Release(*a);
  std::optional<Allocation> again = m.TryAllocate(one);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->GpuIds(), std::vector<int>{1});
  m.Release(*again);
  m.Release(*b);
  std::optional<Allocation> both = m.TryAllocate(PlacementDemand(Make({{"GPU", 2}}), pg, 0));
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->GpuIds(), (std::vector<int>{1, 2}));
}

TEST(LocalResourceManagerTest, FractionalGpuBundleSharesItsOneDevice) {
  LocalResourceManager m(Make({{"GPU", 2}}));
  const PlacementGroupId pg = Pg('e');
  Committed c0 = Commit(m, Make({{"GPU", 0.5}}), pg, 0);
  Committed c1 = Commit(m, Make({{"GPU", 0.5}}), pg, 1);
  ASSERT_EQ(c0.raw.GpuIds(), c1.raw.GpuIds());  // best fit: the same device
  const int device = c0.raw.GpuIds()[0];

  const ResourceSet quarter = PlacementDemand(Make({{"GPU", 0.25}}), pg, 0);
  std::optional<Allocation> a = m.TryAllocate(quarter);
  std::optional<Allocation> b = m.TryAllocate(quarter);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->GpuIds(), std::vector<int>{device});
  EXPECT_EQ(b->GpuIds(), std::vector<int>{device});
  EXPECT_FALSE(m.TryAllocate(quarter).has_value());
  // A whole GPU of the group: both halves are the one device.
  m.Release(*a);
  m.Release(*b);
  EXPECT_TRUE(m.CheckFeasible(PlacementDemand(Make({{"GPU", 1}}), pg, -1)).ok());
  std::optional<Allocation> whole = m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, -1));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->GpuIds(), std::vector<int>{device});
  // The bundles cannot be asked for more than they hold, nor for 1.5 devices.
  EXPECT_EQ(m.CheckFeasible(PlacementDemand(Make({{"GPU", 1}}), pg, 0)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.CheckFeasible(PlacementDemand(Make({{"GPU", 1.5}}), pg, -1)).code(),
            absl::StatusCode::kInvalidArgument);
  // The other device stays whole for plain demands.
  std::optional<Allocation> plain = m.TryAllocate(Make({{"GPU", 1}}));
  ASSERT_TRUE(plain.has_value());
  EXPECT_NE(plain->GpuIds(), std::vector<int>{device});
}

TEST(LocalResourceManagerTest, WildcardDemandTakesAnyBundleOfTheGroup) {
  LocalResourceManager m(Make({{"GPU", 2}}));
  const PlacementGroupId pg = Pg('f');
  Committed c0 = Commit(m, Make({{"GPU", 1}}), pg, 0);
  Committed c1 = Commit(m, Make({{"GPU", 1}}), pg, 1);
  const int gpu0 = c0.raw.GpuIds()[0];
  const int gpu1 = c1.raw.GpuIds()[0];
  ASSERT_NE(gpu0, gpu1);

  // Bundle 1 first: a wildcard demand then gets bundle 0's device, not bundle 1's again.
  std::optional<Allocation> in1 = m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, 1));
  ASSERT_TRUE(in1.has_value());
  EXPECT_EQ(in1->GpuIds(), std::vector<int>{gpu1});
  std::optional<Allocation> any = m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, -1));
  ASSERT_TRUE(any.has_value());
  EXPECT_EQ(any->GpuIds(), std::vector<int>{gpu0});
  EXPECT_FALSE(m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, -1)).has_value());
  // Bundle 0's device is busy under the wildcard: a demand in bundle 0 waits for it.
  EXPECT_FALSE(m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, 0)).has_value());
  m.Release(*any);
  std::optional<Allocation> in0 = m.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), pg, 0));
  ASSERT_TRUE(in0.has_value());
  EXPECT_EQ(in0->GpuIds(), std::vector<int>{gpu0});
}

TEST(LocalResourceManagerTest, AddResourcesRefusesGpusWithoutMatchingInstances) {
  const ResourceSet total = Make({{"GPU", 1}});
  LocalResourceManager m(total);
  const PlacementGroupId pg = Pg('g');
  const ResourceSet renamed = CommittedBundleResources(Make({{"GPU", 1}}), pg, 0);
  EXPECT_EQ(m.AddResources(renamed, {}).code(), absl::StatusCode::kInvalidArgument);
  std::map<std::string, GpuShares> half = {
      {BundleResourceName("GPU", pg, 0), {{0, ResourceSet::kScale / 2}}},
      {BundleResourceName("GPU", pg, std::nullopt), {{0, ResourceSet::kScale}}}};
  EXPECT_EQ(m.AddResources(renamed, half).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.total(), total);  // nothing changed
  EXPECT_EQ(m.available(), total);
}

TEST(LocalResourceManagerTest, BlockedWorkerLendsItsBundleCpusToo) {
  LocalResourceManager m(Make({{"CPU", 2}}));
  const PlacementGroupId pg = Pg('h');
  Committed c = Commit(m, Make({{"CPU", 1}}), pg, 0);
  const ResourceSet one = PlacementDemand(Make({{"CPU", 1}}), pg, 0);
  std::optional<Allocation> a = m.TryAllocate(one);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(m.TryAllocate(one).has_value());
  // Blocked in Get on a child task of the same bundle: the child can run meanwhile.
  m.LendCpu(*a);
  std::optional<Allocation> child = m.TryAllocate(one);
  ASSERT_TRUE(child.has_value());
  m.Release(*child);
  m.ReclaimCpu(*a);
  EXPECT_FALSE(m.TryAllocate(one).has_value());
  m.LendCpu(*a);
  m.Release(*a);  // released while lent: its CPUs are not given back twice
  EXPECT_EQ(m.available().GetFixed(BundleResourceName("CPU", pg, 0)), ResourceSet::kScale);
}

}  // namespace
}  // namespace raio::node
