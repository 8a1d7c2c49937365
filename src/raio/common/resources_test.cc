#include "raio/common/resources.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace raio {
namespace {

ResourceSet Make(const std::map<std::string, double>& m) {
  absl::StatusOr<ResourceSet> r = ResourceSet::FromMap(m);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ResourceSet();
}

void ExpectRejected(const std::map<std::string, double>& m, const char* needle) {
  absl::StatusOr<ResourceSet> r = ResourceSet::FromMap(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string_view::npos) << r.status();
}

TEST(ResourceSetTest, FromMapConvertsToFixedPointAndDropsZeros) {
  ResourceSet r = Make({{"CPU", 2}, {"GPU", 0.5}, {"idle", 0}});
  EXPECT_EQ(r.GetFixed("CPU"), 2 * ResourceSet::kScale);
  EXPECT_EQ(r.GetFixed("GPU"), ResourceSet::kScale / 2);
  EXPECT_DOUBLE_EQ(r.Get("GPU"), 0.5);
  EXPECT_EQ(r.fixed().count("idle"), 0u);
  EXPECT_EQ(r.fixed().size(), 2u);
  EXPECT_EQ(r.GetFixed("absent"), 0);
}

TEST(ResourceSetTest, FromMapRejectsNegativeAmount) { ExpectRejected({{"CPU", -1}}, "CPU"); }

TEST(ResourceSetTest, FromMapRejectsNaN) {
  ExpectRejected({{"GPU", std::numeric_limits<double>::quiet_NaN()}}, "GPU");
}

TEST(ResourceSetTest, FromMapRejectsInfinity) {
  ExpectRejected({{"mem", std::numeric_limits<double>::infinity()}}, "mem");
  ExpectRejected({{"mem", -std::numeric_limits<double>::infinity()}}, "mem");
}

TEST(ResourceSetTest, FromMapRejectsEmptyName) { ExpectRejected({{"", 1}}, "name"); }

TEST(ResourceSetTest, TooLargeAmountErrorNamesTheLimit) {
  ExpectRejected({{"memory", 2e14}}, "the limit is 1e14");
  EXPECT_TRUE(ResourceSet::FromMap({{"memory", 1e14}}).ok());
}

TEST(ResourceSetTest, FromMapRejectsAmountBelowResolution) {
  ExpectRejected({{"CPU", 0.00001}}, "resolution");
}

TEST(ResourceSetTest, TenTenthsAddUpToExactlyOne) {
  ResourceSet tenth = Make({{"GPU", 0.1}});
  ResourceSet sum;
  for (int i = 0; i < 10; ++i) sum.Add(tenth);
  EXPECT_EQ(sum, Make({{"GPU", 1}}));
  EXPECT_EQ(sum.GetFixed("GPU"), ResourceSet::kScale);
  for (int i = 0; i < 10; ++i) sum.Subtract(tenth);
  EXPECT_TRUE(sum.empty()) << sum.ToString();
  EXPECT_EQ(sum, ResourceSet());
}

TEST(ResourceSetTest, SubtractMayGoNegative) {
  ResourceSet r = Make({{"CPU", 1}});
  r.Subtract(Make({{"CPU", 3}}));
  EXPECT_EQ(r.GetFixed("CPU"), -2 * ResourceSet::kScale);
  EXPECT_FALSE(r.Contains(Make({{"CPU", 0.5}})));
}

TEST(ResourceSetTest, ContainsComparesEveryDemandedResource) {
  ResourceSet have = Make({{"CPU", 4}, {"GPU", 1}});
  EXPECT_TRUE(have.Contains(ResourceSet()));
  EXPECT_TRUE(have.Contains(Make({{"CPU", 4}})));
  EXPECT_TRUE(have.Contains(Make({{"CPU", 2}, {"GPU", 0.25}})));
  EXPECT_FALSE(have.Contains(Make({{"CPU", 4.0001}})));
  EXPECT_FALSE(have.Contains(Make({{"CPU", 1}, {"GPU", 2}})));
  EXPECT_FALSE(have.Contains(Make({{"TPU", 1}})));
}

TEST(ResourceSetTest, ProtoRoundTrip) {
  ResourceSet r = Make({{"CPU", 1.5}, {"custom", 3}});
  proto::ResourceSet p;
  r.ToProto(&p);
  EXPECT_DOUBLE_EQ(p.amounts().at("CPU"), 1.5);
  absl::StatusOr<ResourceSet> back = ResourceSet::FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(back->ToMap(), (std::map<std::string, double>{{"CPU", 1.5}, {"custom", 3}}));
}

TEST(ResourceSetTest, ToStringListsAmountsByName) {
  EXPECT_EQ(ResourceSet().ToString(), "{}");
  EXPECT_EQ(Make({{"GPU", 0.5}, {"CPU", 2}}).ToString(), "{CPU: 2, GPU: 0.5}");
  // Memory is shown in GiB (the header's example says "1.0 GiB"; the code prints two
  // decimals).
  EXPECT_EQ(Make({{"CPU", 1}, {"memory", 1024.0 * 1024 * 1024}}).ToString(),
            "{CPU: 1, memory: 1.00 GiB}");
}

TEST(ResourceSetTest, KeyIsEqualForEqualSetsAndDiffersOtherwise) {
  EXPECT_EQ(Make({{"CPU", 1}, {"GPU", 1}}).Key(), Make({{"GPU", 1}, {"CPU", 1}}).Key());
  EXPECT_NE(Make({{"CPU", 1}}).Key(), Make({{"CPU", 2}}).Key());
}

}  // namespace
}  // namespace raio
