// NodeManager against a fake head (testkit::FakeHead on its own thread): what it registers,
// that the head reaches it over the same connection, and that a refused registration
// fails Create and leaves nothing behind; the head's reservation of placement group bundles
// on the node (prepare, commit, cancel) with a lease in a bundle, whose worker is a shell
// script that the test registers by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/common/placement_resources.h"
#include "raio/common/resources.h"
#include "raio/node/node_manager.h"
#include "raio/rpc/service.h"
#include "raio/testkit/fakes.h"
#include "raio/testkit/temp_dir.h"
#include "raio/testkit/time_scale.h"
#include "raio/testkit/wait.h"

namespace raio::node {
namespace {

using namespace std::chrono_literals;

NodeManager::Options NodeOptions(const std::string& dir, const std::string& head) {
  NodeManager::Options options;
  options.session_dir = dir;
  options.head_address = head;
  options.total = *ResourceSet::FromMap({{"CPU", 2}, {"memory", 1e9}, {"disk", 5}});
  options.object_store_bytes = 8 << 20;
  MemoryMonitorOptions no_monitor = MemoryMonitorOptions::FromConfig();
  no_monitor.interval = std::chrono::milliseconds(0);  // off
  options.memory_monitor = no_monitor;
  return options;
}

TEST(NodeManagerTest, RegistersWithTheHeadAndAnswersItOverThatConnection) {
  testkit::TempDir dir("node");
  testkit::FakeHead head;
  auto node = NodeManager::Create(NodeOptions(dir.path(), head.address()));
  ASSERT_TRUE(node.ok()) << node.status();

  auto registrations = head.registrations();
  ASSERT_EQ(registrations.size(), 1u);
  EXPECT_EQ(registrations[0].node_id(), (*node)->id().Hex());
  EXPECT_EQ(registrations[0].address().unix_socket(), dir.Path("node.sock"));
  auto total = ResourceSet::FromProto(registrations[0].total());
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->Get("CPU"), 2);
  EXPECT_EQ(total->Get("disk"), 5);

  auto conns = head.peer().connections();
  ASSERT_EQ(conns.size(), 1u);
  auto stats = rpc::CallSync<proto::GET_NODE_STATS>(*conns[0], proto::Empty());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->node_id(), (*node)->id().Hex());
  EXPECT_EQ(stats->address(), absl::StrCat("127.0.0.1:", (*node)->port()));

  // Stopping closes the head's connection, as the head's node table relies on.
  (*node)->Stop();
  EXPECT_TRUE(testkit::WaitFor([&] { return head.peer().num_connections() == 0; }, 10s));
  EXPECT_EQ(::access(dir.Path("node.sock").c_str(), F_OK), -1);
}

TEST(NodeManagerTest, ARefusedRegistrationFailsCreateAndRemovesTheSocket) {
  testkit::TempDir dir("node");
  testkit::FakeHead head(absl::AlreadyExistsError("node x is already registered"));
  auto node = NodeManager::Create(NodeOptions(dir.path(), head.address()));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(node.status().message(), ::testing::HasSubstr("already registered"));
  EXPECT_EQ(head.registrations().size(), 1u);
  EXPECT_EQ(::access(dir.Path("node.sock").c_str(), F_OK), -1);
}

TEST(NodeManagerTest, CreateFailsWhenNoHeadListens) {
  testkit::TempDir dir("node");
  std::string address;
  {
    testkit::FakeHead head;  // a port that was free a moment ago and is closed now
    address = head.address();
  }
  auto node = NodeManager::Create(NodeOptions(dir.path(), address));
  EXPECT_FALSE(node.ok());
}

// A node (CPU 2) of an embedded cluster (fail_infeasible) against a fake head; a driver of
// job 1 on its Unix socket, whose workers are a script that writes its id and pid and
// sleeps (the test registers it).
class NodeManagerPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_.Start();
    const std::string script = dir_.Path("worker.sh");
    {
      std::ofstream out(script);
      out << "#!/bin/sh\necho $$ > \"" << dir_.path() << "/w.tmp.$RAIO_WORKER_ID\"\n"
          << "mv \"" << dir_.path() << "/w.tmp.$RAIO_WORKER_ID\" \"" << dir_.path()
          << "/w.$RAIO_WORKER_ID\"\nexec sleep " << testkit::Scaled(60s).count() << "\n";
    }
    ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
    NodeManager::Options options = NodeOptions(dir_.path(), head_.address());
    options.fail_infeasible = true;
    auto node = NodeManager::Create(std::move(options));
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(*node);
    ASSERT_EQ(head_.peer().connections().size(), 1u);
    head_conn_ = head_.peer().connections()[0];
    driver_ = ConnectLocal();
    ASSERT_NE(driver_, nullptr);
    proto::RegisterDriverRequest reg;
    reg.set_job_id(1);
    reg.set_executable(script);
    reg.set_working_dir(dir_.path());
    reg.set_worker_id(std::string(8, 'd'));
    auto registered = rpc::CallSync<proto::REGISTER_DRIVER>(*driver_, reg);
    ASSERT_TRUE(registered.ok()) << registered.status();
  }
  void TearDown() override {
    if (node_) node_->Stop();
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
  }

  std::shared_ptr<rpc::Connection> ConnectLocal() {
    auto c = rpc::ConnectUnixReceivingFd(client_.io(), dir_.Path("node.sock"), testkit::Scaled(5s));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    c->connection->Start(nullptr, nullptr);
    return c->connection;
  }
  // Registers the worker process the node started (the script wrote its id and pid).
  WorkerId RegisterStartedWorker() {
    std::string name;
    EXPECT_TRUE(testkit::WaitFor(
        [&] {
          for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
            std::string f = e.path().filename().string();
            if (f.rfind("w.", 0) == 0 && f.rfind("w.tmp.", 0) != 0) name = f;
          }
          return !name.empty();
        },
        10s));
    if (name.empty()) return WorkerId();
    WorkerId id = WorkerId::FromBinary(absl::HexStringToBytes(name.substr(2)));
    pid_t pid = 0;
    std::ifstream(dir_.Path(name)) >> pid;
    pids_.push_back(pid);
    worker_ = ConnectLocal();
    proto::RegisterWorkerRequest reg;
    reg.set_worker_id(id.Binary());
    reg.set_pid(pid);
    reg.mutable_address()->set_ip("127.0.0.1");
    reg.mutable_address()->set_port(1);
    auto registered = rpc::CallSync<proto::REGISTER_WORKER>(*worker_, reg);
    EXPECT_TRUE(registered.ok()) << registered.status();
    return id;
  }
  // Asks for a lease in bundle `index` (-1: any) of `pg_`; the reply comes later.
  std::future<absl::StatusOr<proto::RequestWorkerLeaseReply>> RequestLease(int index) {
    proto::RequestWorkerLeaseRequest req;
    req.set_lease_id(RandomId<LeaseId>().Binary());
    PlacementDemand(*ResourceSet::FromMap({{"CPU", 1}}), pg_, index).ToProto(req.mutable_demand());
    req.set_function_name("f");
    req.set_placement_group_id(pg_.Binary());
    auto promise = std::make_shared<std::promise<absl::StatusOr<proto::RequestWorkerLeaseReply>>>();
    rpc::Call<proto::REQUEST_WORKER_LEASE>(
        *driver_, req, [promise](absl::StatusOr<proto::RequestWorkerLeaseReply> reply) {
          promise->set_value(std::move(reply));
        });
    return promise->get_future();
  }
  proto::BundlesRequest Bundles(std::map<int, std::map<std::string, double>> bundles) {
    proto::BundlesRequest req;
    req.set_placement_group_id(pg_.Binary());
    for (const auto& [index, amounts] : bundles) {
      proto::Bundle* b = req.add_bundles();
      b->set_index(index);
      b->mutable_resources()->mutable_amounts()->insert(amounts.begin(), amounts.end());
    }
    return req;
  }
  proto::NodeStats Stats() {
    auto stats = rpc::CallSync<proto::GET_NODE_STATS>(*head_conn_, proto::Empty());
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : proto::NodeStats();
  }
  // The reports the node sent the head so far (other frames are dropped).
  std::vector<proto::ResourceReport> Reports() {
    std::vector<proto::ResourceReport> out;
    while (head_.peer().HasCall()) {
      if (head_.peer().PendingMethods().front() != "REPORT_RESOURCES") {
        ADD_FAILURE() << "the head got " << head_.peer().PendingMethods().front();
        break;
      }
      auto r = head_.peer().Take<proto::REPORT_RESOURCES>();
      if (r) out.push_back(r->request);
    }
    return out;
  }

  testkit::TempDir dir_{"node"};
  testkit::FakeHead head_;
  EventLoop client_{"test-client"};
  std::unique_ptr<NodeManager> node_;
  std::shared_ptr<rpc::Connection> head_conn_;
  std::shared_ptr<rpc::Connection> driver_;
  std::shared_ptr<rpc::Connection> worker_;
  std::vector<pid_t> pids_;
  const PlacementGroupId pg_ = PlacementGroupId::FromBinary("pgroup01");
};

TEST_F(NodeManagerPlacementTest, OnlyTheHeadReservesBundles) {
  std::shared_ptr<rpc::Connection> other = ConnectLocal();
  ASSERT_NE(other, nullptr);
  proto::BundlesRequest req = Bundles({{0, {{"CPU", 1}}}});
  EXPECT_EQ(rpc::CallSync<proto::PREPARE_BUNDLES>(*other, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(rpc::CallSync<proto::COMMIT_BUNDLES>(*other, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(rpc::CallSync<proto::CANCEL_BUNDLES>(*other, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Stats().available().amounts().at("CPU"), 2);
}

TEST_F(NodeManagerPlacementTest, PrepareBeyondCapacityFailsAndHoldsNothing) {
  auto s = rpc::CallSync<proto::PREPARE_BUNDLES>(*head_conn_,
                                                 Bundles({{0, {{"CPU", 1}}}, {1, {{"CPU", 2}}}}));
  ASSERT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  EXPECT_THAT(s.status().message(),
              ::testing::HasSubstr("bundle 1 of placement group " + pg_.Hex()));
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("{CPU: 2}"));
  EXPECT_EQ(Stats().available().amounts().at("CPU"), 2);
  EXPECT_EQ(rpc::CallSync<proto::PREPARE_BUNDLES>(*head_conn_, Bundles({{0, {}}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rpc::CallSync<proto::COMMIT_BUNDLES>(*head_conn_, Bundles({{0, {}}})).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(NodeManagerPlacementTest, CommittedBundleGrantsLeasesAndCancelEndsTheirWorkers) {
  const WorkerId worker = RegisterStartedWorker();  // the driver's prestarted one
  ASSERT_FALSE(worker.IsNil());
  // The group is not placed yet: even an embedded cluster's node keeps the lease waiting.
  auto lease = RequestLease(0);
  ASSERT_TRUE(testkit::WaitFor(
      [&] {
        proto::NodeStats stats = Stats();
        return stats.pending_leases_size() == 1 && stats.pending_leases(0).infeasible();
      },
      10s));
  EXPECT_EQ(lease.wait_for(0s), std::future_status::timeout);

  proto::BundlesRequest bundle = Bundles({{0, {{"CPU", 1}}}});
  auto prepared = rpc::CallSync<proto::PREPARE_BUNDLES>(*head_conn_, bundle);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(rpc::CallSync<proto::PREPARE_BUNDLES>(*head_conn_, bundle).ok());  // idempotent
  auto committed = rpc::CallSync<proto::COMMIT_BUNDLES>(*head_conn_, bundle);
  ASSERT_TRUE(committed.ok()) << committed.status();
  const std::string cpu0 = BundleResourceName("CPU", pg_, 0);
  // The head heard the new totals before the commit's reply.
  std::vector<proto::ResourceReport> reports = Reports();
  ASSERT_FALSE(reports.empty());
  EXPECT_TRUE(reports.back().total_changed());
  EXPECT_EQ(reports.back().total().amounts().at(cpu0), 1);
  EXPECT_EQ(reports.back().total().amounts().at("CPU"), 2);
  EXPECT_EQ(Stats().total().amounts().at(cpu0), 1);

  ASSERT_EQ(lease.wait_for(testkit::Scaled(10s)), std::future_status::ready);
  absl::StatusOr<proto::RequestWorkerLeaseReply> granted = lease.get();
  ASSERT_TRUE(granted.ok()) << granted.status();
  ASSERT_EQ(granted->result(), proto::RequestWorkerLeaseReply::GRANTED) << granted->message();
  EXPECT_EQ(granted->worker_id(), worker.Binary());

  const std::string cause = RemovedGroupMessage(pg_);
  proto::BundlesRequest cancel = Bundles({});
  cancel.set_cause(cause);
  auto cancelled = rpc::CallSync<proto::CANCEL_BUNDLES>(*head_conn_, cancel);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  proto::GetWorkerFailureCauseRequest ask;
  ask.set_worker_id(worker.Binary());
  auto why = rpc::CallSync<proto::GET_WORKER_FAILURE_CAUSE>(*driver_, ask);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_THAT(why->message(), ::testing::HasSubstr(cause));
  EXPECT_TRUE(testkit::WaitFor([&] { return ::kill(pids_[0], 0) != 0; }, 10s));
  proto::NodeStats stats = Stats();
  EXPECT_EQ(stats.total().amounts().count(cpu0), 0u);
  EXPECT_EQ(stats.available().amounts().at("CPU"), 2);
  reports = Reports();
  ASSERT_FALSE(reports.empty());
  EXPECT_TRUE(reports.back().total_changed());
  EXPECT_EQ(reports.back().total().amounts().count(cpu0), 0u);
  ASSERT_TRUE(rpc::CallSync<proto::CANCEL_BUNDLES>(*head_conn_, cancel).ok());  // idempotent

  // Removed: a waiting lease of the group fails, and so does a new one at once.
  auto waiting = RequestLease(-1);
  ASSERT_TRUE(testkit::WaitFor([&] { return Stats().pending_leases_size() == 1; }, 10s));
  proto::ClusterViewUpdate update;
  update.add_removed_placement_groups(pg_.Binary());
  rpc::Notify<proto::UPDATE_CLUSTER_VIEW>(*head_conn_, update);
  ASSERT_EQ(waiting.wait_for(testkit::Scaled(10s)), std::future_status::ready);
  absl::StatusOr<proto::RequestWorkerLeaseReply> failed = waiting.get();
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->result(), proto::RequestWorkerLeaseReply::INFEASIBLE);
  EXPECT_EQ(failed->message(), cause);
  auto late = RequestLease(0);
  ASSERT_EQ(late.wait_for(testkit::Scaled(10s)), std::future_status::ready);
  absl::StatusOr<proto::RequestWorkerLeaseReply> refused = late.get();
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->result(), proto::RequestWorkerLeaseReply::INFEASIBLE);
  EXPECT_EQ(refused->message(), cause);
}

}  // namespace
}  // namespace raio::node
