#include "raio/node/scheduler/placement_group_resource_manager.h"

#include "gtest/gtest.h"
#include "raio/common/placement_resources.h"

namespace raio::node {
namespace {

ResourceSet Make(const std::map<std::string, double>& m) {
  absl::StatusOr<ResourceSet> r = ResourceSet::FromMap(m);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ResourceSet();
}

const PlacementGroupId kPg = PlacementGroupId::FromBinary("pgroup01");

proto::BundlesRequest Bundles(const std::vector<std::pair<int, ResourceSet>>& bundles,
                              const PlacementGroupId& pg = kPg) {
  proto::BundlesRequest req;
  req.set_placement_group_id(pg.Binary());
  for (const auto& [index, resources] : bundles) {
    proto::Bundle* b = req.add_bundles();
    b->set_index(static_cast<uint32_t>(index));
    resources.ToProto(b->mutable_resources());
  }
  return req;
}

PlacementGroupResourceManager::Request Parse(const proto::BundlesRequest& req,
                                             bool need_resources = true) {
  auto parsed = PlacementGroupResourceManager::Parse(req, need_resources);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : PlacementGroupResourceManager::Request();
}

TEST(PlacementGroupResourceManagerTest, ParseRefusesMalformedRequests) {
  proto::BundlesRequest short_id = Bundles({{0, Make({{"CPU", 1}})}});
  short_id.set_placement_group_id("abc");
  EXPECT_EQ(PlacementGroupResourceManager::Parse(short_id, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PlacementGroupResourceManager::Parse(Bundles({{0, ResourceSet()}}), true).status().code(),
      absl::StatusCode::kInvalidArgument);
  // An empty bundle is fine where only indices count (COMMIT, CANCEL).
  EXPECT_TRUE(PlacementGroupResourceManager::Parse(Bundles({{0, ResourceSet()}}), false).ok());
  EXPECT_EQ(PlacementGroupResourceManager::Parse(
                Bundles({{0, Make({{"CPU", 1}})}, {0, Make({{"CPU", 1}})}}), true)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  proto::BundlesRequest nan = Bundles({{0, Make({{"CPU", 1}})}});
  (*nan.mutable_bundles(0)->mutable_resources()->mutable_amounts())["CPU"] = -1;
  EXPECT_EQ(PlacementGroupResourceManager::Parse(nan, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementGroupResourceManager::Parse(
                Bundles({{0, Make({{BundleResourceName("CPU", kPg, 0), 1}})}}), true)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementGroupResourceManager::Parse(Bundles({{0, Make({{"GPU", 1.5}})}}), true)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementGroupResourceManagerTest, PrepareHoldsAllBundlesOrNone) {
  const ResourceSet total = Make({{"CPU", 4}});
  LocalResourceManager resources(total);
  PlacementGroupResourceManager bundles(resources, "node1");
  absl::Status s =
      bundles.Prepare(Parse(Bundles({{0, Make({{"CPU", 2}})}, {1, Make({{"CPU", 3}})}})));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("bundle 1 of placement group " + kPg.Hex()), std::string::npos) << s;
  EXPECT_NE(s.message().find("{CPU: 3}"), std::string::npos) << s;
  EXPECT_EQ(resources.available(), total);  // nothing stays held
  EXPECT_TRUE(bundles.Held(kPg, {}).empty());

  ASSERT_TRUE(bundles.Prepare(Parse(Bundles({{0, Make({{"CPU", 2}})}}))).ok());
  ASSERT_TRUE(bundles.Prepare(Parse(Bundles({{0, Make({{"CPU", 2}})}}))).ok());  // again: OK
  EXPECT_EQ(resources.available().Get("CPU"), 2);
  EXPECT_EQ(resources.total(), total);  // prepared, not committed
}

TEST(PlacementGroupResourceManagerTest, CommitAddsRenamedResourcesOnce) {
  LocalResourceManager resources(Make({{"CPU", 4}, {"GPU", 2}}));
  PlacementGroupResourceManager bundles(resources, "node1");
  auto b0 = Parse(Bundles({{0, Make({{"CPU", 1}, {"GPU", 1}})}, {1, Make({{"CPU", 1}})}}));
  absl::StatusOr<bool> unprepared = bundles.Commit(b0);
  EXPECT_EQ(unprepared.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(bundles.Prepare(b0).ok());
  absl::StatusOr<bool> changed = bundles.Commit(b0);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  absl::StatusOr<bool> again = bundles.Commit(b0);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(resources.total().Get(BundleResourceName("CPU", kPg, std::nullopt)), 2);
  EXPECT_EQ(resources.total().Get(BundleResourceName("GPU", kPg, 0)), 1);
  EXPECT_EQ(resources.total().Get(BundleResourceName("bundle", kPg, 1)), kBundleMarkerCapacity);
  std::optional<Allocation> a = resources.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), kPg, 0));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->GpuIds().size(), 1u);
}

TEST(PlacementGroupResourceManagerTest, HoldersOfAReturnedBundleMustEnd) {
  LocalResourceManager resources(Make({{"CPU", 4}, {"GPU", 2}}));
  PlacementGroupResourceManager bundles(resources, "node1");
  auto req = Parse(Bundles({{0, Make({{"GPU", 1}})}, {1, Make({{"CPU", 1}, {"GPU", 1}})}}));
  ASSERT_TRUE(bundles.Prepare(req).ok());
  ASSERT_TRUE(bundles.Commit(req).ok());
  std::optional<Allocation> in0 =
      resources.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), kPg, 0));
  std::optional<Allocation> in1 =
      resources.TryAllocate(PlacementDemand(Make({{"CPU", 1}}), kPg, 1));
  ASSERT_TRUE(in0 && in1);
  Allocation plain;
  plain.resources = Make({{"CPU", 1}});
  EXPECT_TRUE(bundles.MustEndWith(*in0, kPg, {0}));
  EXPECT_FALSE(bundles.MustEndWith(*in1, kPg, {0}));
  EXPECT_FALSE(bundles.MustEndWith(plain, kPg, {0, 1}));
  // Wildcard only: on bundle 1's GPU (bundle 0's is taken), so it goes with bundle 1.
  std::optional<Allocation> any =
      resources.TryAllocate(PlacementDemand(Make({{"GPU", 1}}), kPg, -1));
  ASSERT_TRUE(any.has_value());
  EXPECT_FALSE(bundles.MustEndWith(*any, kPg, {0}));
  EXPECT_TRUE(bundles.MustEndWith(*any, kPg, {1}));
  resources.Release(*any);
  // A CPU-only wildcard holder ends when the group leaves the node.
  std::optional<Allocation> cpu =
      resources.TryAllocate(PlacementDemand(Make({{"CPU", 1}}), kPg, -1));
  ASSERT_FALSE(cpu.has_value());  // bundle 1's one CPU is taken
  resources.Release(*in1);
  cpu = resources.TryAllocate(PlacementDemand(Make({{"CPU", 1}}), kPg, -1));
  ASSERT_TRUE(cpu.has_value());
  EXPECT_FALSE(bundles.MustEndWith(*cpu, kPg, {0}));
  EXPECT_TRUE(bundles.MustEndWith(*cpu, kPg, {0, 1}));
}

TEST(PlacementGroupResourceManagerTest, ReturnGivesEverythingBack) {
  const ResourceSet total = Make({{"CPU", 4}, {"GPU", 1}});
  LocalResourceManager resources(total);
  PlacementGroupResourceManager bundles(resources, "node1");
  auto req = Parse(Bundles({{0, Make({{"CPU", 1}, {"GPU", 1}})}, {1, Make({{"CPU", 2}})}}));
  ASSERT_TRUE(bundles.Prepare(req).ok());
  ASSERT_TRUE(bundles.Commit(Parse(Bundles({{0, ResourceSet()}}), false)).ok());
  EXPECT_EQ(bundles.Held(kPg, {}), (std::vector<int>{0, 1}));
  EXPECT_EQ(bundles.Held(kPg, {1, 7}), std::vector<int>{1});
  EXPECT_TRUE(bundles.Return(kPg, 0));   // committed: the totals change
  EXPECT_FALSE(bundles.Return(kPg, 1));  // prepared only
  EXPECT_FALSE(bundles.Return(kPg, 1));  // unknown now
  EXPECT_FALSE(bundles.HoldsGroup(kPg));
  EXPECT_EQ(resources.total(), total);
  EXPECT_EQ(resources.available(), total);
}

}  // namespace
}  // namespace raio::node
