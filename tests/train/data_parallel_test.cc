// Data-parallel helpers without a cluster: DistributedSampler's shards (PyTorch's rules),
// and the bucketed broadcast and gradient all-reduce between two ranks on threads of this
// process, over a c10d TCPStore on port 0 and Gloo on 127.0.0.1.
#include "raio/train/data_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "raio/testkit/time_scale.h"

namespace raio::train {
namespace {

TEST(DistributedSamplerTest, ShardsAreDisjointAndCoverTheDataEachEpoch) {
  DistributedSampler a(10, 2, 0, /*shuffle=*/true, /*seed=*/7);
  DistributedSampler b(10, 2, 1, /*shuffle=*/true, /*seed=*/7);
  std::vector<int64_t> previous;
  for (int epoch = 0; epoch < 3; ++epoch) {
    a.SetEpoch(epoch);
    b.SetEpoch(epoch);
    std::vector<int64_t> ia = a.Indices(), ib = b.Indices();
    ASSERT_EQ(ia.size(), 5u);
    ASSERT_EQ(ib.size(), 5u);
    std::set<int64_t> all(ia.begin(), ia.end());
    all.insert(ib.begin(), ib.end());
    EXPECT_EQ(all.size(), 10u);
    EXPECT_EQ(*all.begin(), 0);
    EXPECT_EQ(*all.rbegin(), 9);
    EXPECT_NE(ia, previous) << "epoch " << epoch << " did not reshuffle";
    previous = ia;
    EXPECT_EQ(a.Indices(), ia);  // deterministic for (seed, epoch)
  }
}

TEST(DistributedSamplerTest, InterleavesOneOrderAsPyTorchDoes) {
  // Rank r takes positions r, r + R, ... of the one-replica order.
  DistributedSampler whole(12, 1, 0, true, 3);
  whole.SetEpoch(2);
  std::vector<int64_t> order = whole.Indices();
  for (int r = 0; r < 3; ++r) {
    DistributedSampler part(12, 3, r, true, 3);
    part.SetEpoch(2);
    std::vector<int64_t> mine = part.Indices();
    ASSERT_EQ(mine.size(), 4u);
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], order[r + 3 * i]);
  }
}

TEST(DistributedSamplerTest, PadsByRepeatingTheHeadOrDropsTheTail) {
  DistributedSampler padded(5, 2, 1, /*shuffle=*/false);
  EXPECT_EQ(padded.size(), 3);
  EXPECT_EQ(padded.Indices(), (std::vector<int64_t>{1, 3, 0}));  // 0 1 2 3 4 | 0
  DistributedSampler dropped(5, 2, 1, /*shuffle=*/false, 0, /*drop_last=*/true);
  EXPECT_EQ(dropped.size(), 2);
  EXPECT_EQ(dropped.Indices(), (std::vector<int64_t>{1, 3}));
  DistributedSampler tiny(1, 3, 2, /*shuffle=*/false);  // padded past the data's length
  EXPECT_EQ(tiny.Indices(), (std::vector<int64_t>{0}));
  EXPECT_TRUE(DistributedSampler(0, 2, 0).Indices().empty());
}

TEST(DistributedSamplerTest, RefusesBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 2, 2), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), std::invalid_argument);
}

// Runs `body(rank, group)` on two threads joined by a Gloo group on 127.0.0.1.
void OnTwoRanks(const std::function<void(int, c10d::ProcessGroup&)>& body) {
  c10d::TCPStoreOptions server_options;
  server_options.port = 0;
  server_options.isServer = true;
  server_options.waitWorkers = false;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_options);
  auto run = [&](int rank) {
    c10::intrusive_ptr<c10d::Store> store = server;
    if (rank != 0) {
      c10d::TCPStoreOptions o;
      o.port = server->getPort();
      o.waitWorkers = false;
      store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    }
    // The collectives' deadline: scaled (testkit/time_scale.h), the other rank being a
    // thread of this slower-under-sanitizers process.
    auto options =
        c10d::ProcessGroupGloo::Options::create(testkit::Scaled(std::chrono::seconds(30)));
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("t", store), rank, 2, options);
    body(rank, *group);
  };
  std::thread other(run, 1);
  run(0);
  other.join();
}

TEST(GradientAllReducerTest, AveragesGradientsInSeveralBuckets) {
  std::vector<torch::Tensor> results[2];
  int buckets = 0;
  OnTwoRanks([&](int rank, c10d::ProcessGroup& group) {
    std::vector<torch::Tensor> params = {
        torch::zeros({3, 4}, torch::requires_grad()), torch::zeros({5}, torch::requires_grad()),
        torch::zeros({2}, torch::requires_grad()),
        torch::zeros({7}, torch::TensorOptions().dtype(torch::kFloat64).requires_grad(true)),
        torch::zeros({4})};  // not trainable: skipped
    params[0].mutable_grad() = torch::full({3, 4}, rank == 0 ? 1.0f : 3.0f);
    params[1].mutable_grad() = torch::arange(5, torch::kFloat) * (rank + 1);
    // params[2]: no gradient on either rank; params[3] only on rank 1.
    if (rank == 1) params[3].mutable_grad() = torch::ones({7}, torch::kFloat64) * 4;
    // 40 bytes a bucket: [3x4 float] alone, [5 + 2 floats], [7 doubles].
    GradientAllReducer reducer(group, params, /*bucket_cap_bytes=*/40);
    reducer.AllReduce();
    if (rank == 0) buckets = reducer.num_buckets();
    for (auto& p : params) results[rank].push_back(p.grad().defined() ? p.grad() : torch::Tensor());
  });
  EXPECT_EQ(buckets, 3);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& g = results[rank];
    EXPECT_TRUE(torch::allclose(g[0], torch::full({3, 4}, 2.0f)));
    EXPECT_TRUE(torch::allclose(g[1], torch::arange(5, torch::kFloat) * 1.5));
    EXPECT_TRUE(torch::allclose(g[2], torch::zeros({2})));
    EXPECT_TRUE(torch::allclose(g[3], torch::ones({7}, torch::kFloat64) * 2));
    EXPECT_FALSE(g[4].defined());
  }
}

TEST(GradientAllReducerTest, PrepareModelStartsEveryRankFromRankZerosWeights) {
  std::vector<torch::Tensor> weights[2];
  OnTwoRanks([&](int rank, c10d::ProcessGroup& group) {
    torch::manual_seed(100 + rank);  // different on each rank before the broadcast
    torch::nn::Linear a(6, 5), b(5, 2);
    std::vector<torch::Tensor> state = a->parameters();
    for (const auto& p : b->parameters()) state.push_back(p);
    BroadcastTensors(group, state, /*root=*/0, /*bucket_cap_bytes=*/64);
    for (const auto& p : state) weights[rank].push_back(p.detach().clone());
  });
  ASSERT_EQ(weights[0].size(), 4u);
  for (size_t i = 0; i < weights[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(weights[0][i], weights[1][i])) << "tensor " << i;
  }
}

}  // namespace
}  // namespace raio::train
