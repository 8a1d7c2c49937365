// ObjectManager between real nodes in one process: each TestNode has its own loop, a real
// shared-memory store (ObjectStoreService::Create, small capacities, spill files in a temp
// dir) and a TCP listener on 127.0.0.1 port 0 serving READ_OBJECT_CHUNK.
#include "raio/node/object_manager/object_manager.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/frame.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/testkit/temp_dir.h"
#include "raio/testkit/time_scale.h"

namespace raio::node {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1 << 20;

std::string RandomBytes(std::size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    uint64_t v = gen();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return out;
}

// FNV-1a, 64 bits.
uint64_t Checksum(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Polls `done` until it holds or `deadline` times the test time scale passes (scaled here,
// as testkit::WaitFor does).
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds deadline = 10s) {
  const auto end = std::chrono::steady_clock::now() + testkit::Scaled(deadline);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

// One node: loop, store, object manager, TCP listener.
class TestNode {
 public:
  // Sees every frame the node receives before its service does; true drops it.
  using Intercept = std::function<bool(const std::shared_ptr<rpc::Connection>&,
                                       const rpc::FrameHeader&, std::string_view body)>;

  explicit TestNode(uint64_t capacity_bytes, uint64_t chunk_bytes = 64 * 1024,
                    int chunks_in_flight = 4)
      : loop_("test-node") {
    store_ = *ObjectStoreService::Create(capacity_bytes, dir_.Path("spill"), 0);
    ObjectManager::Options options;
    options.connection_factory = rpc::MakeSocketConnectionFactory("", testkit::Scaled(5s));
    options.chunk_bytes = chunk_bytes;
    options.chunks_in_flight = chunks_in_flight;
    manager_ = std::make_unique<ObjectManager>(loop_.io(), *store_, options);
    manager_->RegisterHandlers(service_);
    listener_ = *rpc::Listener::ListenTcp(
        loop_.io(), "127.0.0.1", 0,
        [this](std::shared_ptr<rpc::Connection> c) { Accept(std::move(c)); });
    loop_.Start();
  }
  ~TestNode() {
    Run([this] {
      manager_.reset();
      listener_->Stop();
      for (auto& c : conns_) c->Close(absl::CancelledError("test over"));
      conns_.clear();
      return 0;
    });
    loop_.Stop();
  }

  // Runs `f` on the node's loop and returns its result.
  template <typename F>
  auto Run(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    loop_.Post([&task] { task(); });
    return result.get();
  }

  proto::Address address() const {
    proto::Address a;
    a.set_ip("127.0.0.1");
    a.set_port(listener_->port());
    return a;
  }
  int port() const { return listener_->port(); }
  std::string spill_dir() const { return dir_.Path("spill"); }

  // Stores `bytes` as a sealed primary object `id`.
  void Put(const ObjectId& id, const std::string& bytes) {
    absl::Status s = Run([&] {
      absl::StatusOr<ObjectLocation> loc = absl::UnknownError("no answer");
      store_->CreateForNode(id, bytes.size(), CopyKind::kPrimary,
                            [&loc](absl::StatusOr<ObjectLocation> l) { loc = std::move(l); });
      if (!loc.ok()) return loc.status();
      if (!bytes.empty()) std::memcpy(store_->shm_base() + loc->offset, bytes.data(), bytes.size());
      return store_->SealForNode(id);
    });
    ASSERT_TRUE(s.ok()) << s;
  }
  // Allocates an unsealed (so pinned) object of the node's, taking room; ok when it fits now.
  bool Block(const ObjectId& id, uint64_t size) {
    return Run([&] {
      bool made = false;
      store_->CreateForNode(id, size, CopyKind::kPrimary,
                            [&made](absl::StatusOr<ObjectLocation> l) { made = l.ok(); });
      return made;
    });
  }
  void Unblock(const ObjectId& id) {
    Run([&] {
      store_->AbortCreateForNode(id);
      return 0;
    });
  }
  // The object's bytes, or nullopt when it is not here.
  std::optional<std::string> Read(const ObjectId& id) {
    return Run([&]() -> std::optional<std::string> {
      absl::StatusOr<ObjectLocation> loc = store_->PinForNode(id);
      if (!loc.ok()) return std::nullopt;
      std::string out(reinterpret_cast<const char*>(store_->shm_base() + loc->offset), loc->size);
      store_->UnpinForNode(id);
      return out;
    });
  }
  bool Has(const ObjectId& id) {
    return Run([&] { return store_->HasSealed(id); });
  }
  std::vector<ObjectInfo> List() {
    return Run([&] { return store_->ListInfo(); });
  }

  std::future<absl::Status> PullAsync(const ObjectId& id, std::vector<proto::Address> sources) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    auto future = promise->get_future();
    Run([&] {
      manager_->Pull(id, std::move(sources),
                     [promise](const absl::Status& s) { promise->set_value(s); });
      return 0;
    });
    return future;
  }
  absl::Status Pull(const ObjectId& id, std::vector<proto::Address> sources) {
    auto future = PullAsync(id, std::move(sources));
    if (future.wait_for(testkit::Scaled(30s)) != std::future_status::ready) {
      return absl::DeadlineExceededError("pull did not finish in time");
    }
    return future.get();
  }

  ObjectManager::Stats stats() {
    return Run([&] { return manager_->stats(); });
  }
  ObjectManager& manager() { return *manager_; }
  ObjectStoreService& store() { return *store_; }
  void SetIntercept(Intercept intercept) {
    Run([&] {
      intercept_ = std::move(intercept);
      return 0;
    });
  }

 private:
  void Accept(std::shared_ptr<rpc::Connection> conn) {
    conns_.push_back(conn);
    conn->Start(
        [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
               std::string_view body) {
          if (intercept_ && intercept_(c, h, body)) return;
          if (!service_.Dispatch(c, h, body)) service_.RejectUnknown(c, h);
        },
        nullptr);
  }

  testkit::TempDir dir_{"om-test"};
  EventLoop loop_;
  std::unique_ptr<ObjectStoreService> store_;
  rpc::Service service_{"test-node"};
  std::unique_ptr<ObjectManager> manager_;
  std::unique_ptr<rpc::Listener> listener_;
  std::vector<std::shared_ptr<rpc::Connection>> conns_;
  Intercept intercept_;
};

// Closes the connection of the `n`-th READ_OBJECT_CHUNK (counting from 1) and every later
// one, instead of answering.
TestNode::Intercept CloseFromChunk(int n) {
  auto seen = std::make_shared<int>(0);
  return [seen, n](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                   std::string_view) {
    if (h.method != proto::READ_OBJECT_CHUNK || ++*seen < n) return false;
    c->Close(absl::UnavailableError("test closes mid-transfer"));
    return true;
  };
}

TEST(ObjectManagerTest, TransfersMultiChunkObjectIntact) {
  TestNode src(8 * kMiB), dst(8 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(3 * kMiB + 123, 1);  // 49 chunks of 64 KiB, last short
  src.Put(id, bytes);

  ASSERT_TRUE(dst.Pull(id, {src.address()}).ok());

  std::optional<std::string> got = dst.Read(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->size(), bytes.size());
  EXPECT_EQ(Checksum(*got), Checksum(bytes));
  EXPECT_TRUE(*got == bytes);
  EXPECT_EQ(dst.stats().chunks_requested, 49u);
  EXPECT_EQ(dst.stats().bytes_received, bytes.size());
  EXPECT_EQ(src.stats().chunks_served, 49u);
  EXPECT_EQ(dst.stats().transfers_succeeded, 1u);
  // A sealed, unpinned secondary copy.
  std::vector<ObjectInfo> objects = dst.List();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0].state, ObjectState::kSealed);
  EXPECT_EQ(objects[0].num_pins, 0u);
  EXPECT_EQ(objects[0].kind, CopyKind::kSecondary);
}

TEST(ObjectManagerTest, TransfersZeroAndOneByteObjects) {
  TestNode src(kMiB), dst(kMiB);
  const ObjectId empty = RandomId<ObjectId>(), one = RandomId<ObjectId>();
  src.Put(empty, "");
  src.Put(one, "x");

  ASSERT_TRUE(dst.Pull(empty, {src.address()}).ok());
  ASSERT_TRUE(dst.Pull(one, {src.address()}).ok());

  EXPECT_EQ(dst.Read(empty), std::optional<std::string>(""));
  EXPECT_EQ(dst.Read(one), std::optional<std::string>("x"));
}

TEST(ObjectManagerTest, PullOfObjectAlreadyHereSucceedsWithoutTransfer) {
  TestNode dst(kMiB);
  const ObjectId id = RandomId<ObjectId>();
  dst.Put(id, "here");
  proto::Address nowhere;
  nowhere.set_ip("127.0.0.1");
  nowhere.set_port(1);

  EXPECT_TRUE(dst.Pull(id, {nowhere}).ok());
  EXPECT_EQ(dst.stats().transfers_started, 0u);
}

TEST(ObjectManagerTest, RetriesRemainingChunksFromNextSourceWhenOneClosesMidTransfer) {
  TestNode a(8 * kMiB), b(8 * kMiB), dst(8 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(2 * kMiB, 2);  // 32 chunks
  a.Put(id, bytes);
  b.Put(id, bytes);
  a.SetIntercept(CloseFromChunk(6));

  ASSERT_TRUE(dst.Pull(id, {a.address(), b.address()}).ok());

  EXPECT_EQ(Checksum(*dst.Read(id)), Checksum(bytes));
  // a answered 5 chunks, some of which the close may have cut off before they were sent;
  // b sent the rest, and each byte was written once.
  EXPECT_EQ(a.stats().chunks_served, 5u);
  EXPECT_GE(b.stats().chunks_served, 32u - 5u);
  EXPECT_LT(b.stats().chunks_served, 32u);
  EXPECT_EQ(dst.stats().bytes_received, bytes.size());
  EXPECT_EQ(dst.stats().source_failures, 1u);
}

TEST(ObjectManagerTest, FailsNamingEverySourceWhenAllFail) {
  TestNode empty(kMiB), dst(kMiB);
  int closed_port = 0;
  {
    TestNode gone(kMiB);
    closed_port = gone.port();
  }
  proto::Address nobody;
  nobody.set_ip("127.0.0.1");
  nobody.set_port(closed_port);
  const ObjectId id = RandomId<ObjectId>();

  absl::Status s = dst.Pull(id, {empty.address(), nobody});

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(id.Hex()), std::string::npos) << s;
  EXPECT_NE(s.message().find("any of its 2 sources"), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat("127.0.0.1:", empty.port(), ": NOT_FOUND")),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find(absl::StrCat("127.0.0.1:", closed_port, ": UNAVAILABLE")),
            std::string::npos)
      << s;
  EXPECT_TRUE(dst.List().empty());
}

TEST(ObjectManagerTest, DropsHalfWrittenCopyWhenOnlySourceLosesObjectMidTransfer) {
  TestNode src(4 * kMiB), dst(4 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, RandomBytes(kMiB, 3));
  auto seen = std::make_shared<int>(0);
  ObjectStoreService* store = &src.store();
  src.SetIntercept([seen, store, id](const std::shared_ptr<rpc::Connection>&,
                                     const rpc::FrameHeader& h, std::string_view) {
    if (h.method == proto::READ_OBJECT_CHUNK && ++*seen == 4) store->DeleteObject(id);
    return false;  // the service answers: NOT_FOUND from now on
  });

  absl::Status s = dst.Pull(id, {src.address()});

  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("could not be pulled from its source"), std::string::npos) << s;
  EXPECT_TRUE(dst.List().empty());  // the unsealed copy is gone
}

TEST(ObjectManagerTest, PullWaitsForRoomAndCompletesWhenRoomIsMade) {
  TestNode src(4 * kMiB), dst(4 * kMiB);
  const ObjectId id = RandomId<ObjectId>(), blocker = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(2 * kMiB, 4);
  src.Put(id, bytes);
  ASSERT_TRUE(dst.Block(blocker, 3 * kMiB));  // pinned: cannot be spilled or evicted

  std::future<absl::Status> pull = dst.PullAsync(id, {src.address()});
  ASSERT_TRUE(WaitUntil(
      [&] { return dst.Run([&] { return dst.manager().num_waiting_for_room(); }) == 1; }));
  EXPECT_EQ(pull.wait_for(0s), std::future_status::timeout);
  EXPECT_EQ(dst.stats().bytes_received, 0u);  // nothing written before admission

  dst.Unblock(blocker);

  ASSERT_EQ(pull.wait_for(testkit::Scaled(30s)), std::future_status::ready);
  EXPECT_TRUE(pull.get().ok());
  EXPECT_EQ(Checksum(*dst.Read(id)), Checksum(bytes));
}

TEST(ObjectManagerTest, FailsAtOnceWhenObjectCanNeverFit) {
  TestNode src(4 * kMiB), dst(kMiB);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, RandomBytes(2 * kMiB, 5));

  absl::Status s = dst.Pull(id, {src.address()});

  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("can never fit"), std::string::npos) << s;
  EXPECT_NE(s.message().find(id.Hex()), std::string::npos) << s;
  EXPECT_TRUE(dst.List().empty());
}

TEST(ObjectManagerTest, ConcurrentPullsOfOneObjectMakeOneTransfer) {
  TestNode src(4 * kMiB), dst(4 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(kMiB, 6);  // 16 chunks
  src.Put(id, bytes);

  // Both in one loop turn, so that the first cannot have finished before the second.
  std::promise<absl::Status> first_done, second_done;
  std::future<absl::Status> first = first_done.get_future(), second = second_done.get_future();
  dst.Run([&] {
    dst.manager().Pull(id, {src.address()},
                       [&first_done](const absl::Status& s) { first_done.set_value(s); });
    dst.manager().Pull(id, {src.address()},
                       [&second_done](const absl::Status& s) { second_done.set_value(s); });
    return 0;
  });

  ASSERT_EQ(first.wait_for(testkit::Scaled(30s)), std::future_status::ready);
  ASSERT_EQ(second.wait_for(testkit::Scaled(30s)), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  EXPECT_EQ(dst.stats().transfers_started, 1u);
  EXPECT_EQ(dst.stats().pulls_merged, 1u);
  EXPECT_EQ(src.stats().chunks_served, 16u);
  EXPECT_EQ(Checksum(*dst.Read(id)), Checksum(bytes));
}

TEST(ObjectManagerTest, ReceivedCopyIsEvictedForLaterCreateAndFreedByDelete) {
  TestNode src(4 * kMiB), dst(4 * kMiB);
  const ObjectId id = RandomId<ObjectId>(), big = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(3 * kMiB, 7);
  src.Put(id, bytes);
  ASSERT_TRUE(dst.Pull(id, {src.address()}).ok());

  // A create that needs the copy's room evicts it: no spill file, the object forgotten.
  ASSERT_TRUE(dst.Block(big, 3 * kMiB));
  EXPECT_FALSE(dst.Has(id));
  EXPECT_TRUE(std::filesystem::is_empty(dst.spill_dir()));
  dst.Unblock(big);

  // Pulled again, then deleted: freed.
  ASSERT_TRUE(dst.Pull(id, {src.address()}).ok());
  EXPECT_EQ(Checksum(*dst.Read(id)), Checksum(bytes));
  dst.Run([&] {
    dst.store().DeleteObject(id);
    return 0;
  });
  EXPECT_FALSE(dst.Has(id));
  EXPECT_EQ(dst.Run([&] { return dst.store().stats().used_bytes; }), 0u);
}

TEST(ObjectManagerTest, AnswersMalformedChunkRequestsWithClearErrors) {
  TestNode src(kMiB);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, "0123456789");
  EventLoop client_loop("client");
  auto conn = rpc::ConnectTcp(client_loop.io(), absl::StrCat("127.0.0.1:", src.port()),
                              testkit::Scaled(5s));
  ASSERT_TRUE(conn.ok()) << conn.status();
  (*conn)->Start(nullptr, nullptr);
  client_loop.Start();
  auto read = [&](std::string object_id, uint64_t offset, uint64_t length) {
    proto::ReadObjectChunkRequest req;
    req.set_object_id(std::move(object_id));
    req.set_offset_bytes(offset);
    req.set_length_bytes(length);
    return rpc::CallSync<proto::READ_OBJECT_CHUNK>(**conn, req);
  };

  auto past_end = read(id.Binary(), 11, 1);
  EXPECT_EQ(past_end.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(past_end.status().message().find("past its end (10 bytes)"), std::string::npos)
      << past_end.status();
  auto huge = read(id.Binary(), 0, uint64_t{1} << 40);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("largest chunk"), std::string::npos) << huge.status();
  auto bad_id = read("short", 0, 1);
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  auto unknown = read(RandomId<ObjectId>().Binary(), 0, 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);

  // Still serving: a read past the end is cut short, one at the end is empty.
  auto tail = read(id.Binary(), 6, 100);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->object_size_bytes(), 10u);
  EXPECT_EQ(tail->data(), "6789");
  auto at_end = read(id.Binary(), 10, 100);
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_EQ(at_end->data(), "");
  // No pin is left behind.
  EXPECT_EQ(src.List().at(0).num_pins, 0u);

  (*conn)->Close(absl::CancelledError("test over"));
  client_loop.Stop();
}

TEST(ObjectManagerTest, ServedChunkStaysPinnedUntilWrittenAndIsUnpinnedWhenThePeerGoes) {
  TestNode src(64 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, RandomBytes(32 * kMiB, 8));
  // A raw client asks for one 32 MiB chunk and never reads: the reply cannot all fit in
  // the sockets' buffers, so it waits to be written, from the store.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(src.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  proto::ReadObjectChunkRequest req;
  req.set_object_id(id.Binary());
  req.set_length_bytes(32 * kMiB);
  const std::string body = req.SerializeAsString();
  std::string frame(rpc::kFrameHeaderBytes, '\0');
  rpc::EncodeFrameHeader(
      {rpc::FrameKind::kRequest, proto::READ_OBJECT_CHUNK, 1, static_cast<uint32_t>(body.size())},
      frame.data());
  frame += body;
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  ASSERT_TRUE(WaitUntil([&] { return src.stats().chunks_served == 1; }));

  EXPECT_EQ(src.List().at(0).num_pins, 1u);  // pinned while its bytes wait

  ::close(fd);  // the puller goes away: the connection closes and lets the bytes go
  EXPECT_TRUE(WaitUntil([&] { return src.List().at(0).num_pins == 0; }));
}

TEST(ObjectManagerTest, PullsFromAPeerThatSendsTheBytesInsideItsReplies) {
  TestNode src(8 * kMiB), dst(8 * kMiB);
  const ObjectId id = RandomId<ObjectId>();
  const std::string bytes = RandomBytes(kMiB + 5, 9);
  src.Put(id, bytes);
  // The source answers as a peer without raw tails would: `data` inside the message.
  src.SetIntercept([bytes](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                           std::string_view body) {
    if (h.method != proto::READ_OBJECT_CHUNK) return false;
    proto::ReadObjectChunkRequest req;
    EXPECT_TRUE(req.ParseFromArray(body.data(), static_cast<int>(body.size())));
    proto::ReadObjectChunkReply reply;
    reply.set_object_size_bytes(bytes.size());
    reply.set_data(bytes.substr(req.offset_bytes(), req.length_bytes()));
    c->Reply(h, reply);
    return true;
  });

  ASSERT_TRUE(dst.Pull(id, {src.address()}).ok());

  EXPECT_TRUE(*dst.Read(id) == bytes);
  EXPECT_EQ(dst.stats().bytes_received, bytes.size());
}

TEST(ObjectManagerTest, FailedPullDropsItsCopyOnlyOnceNoReadIsOutstanding) {
  TestNode src(8 * kMiB), dst(8 * kMiB, 64 * 1024, 4);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, RandomBytes(kMiB, 10));
  // The probe is answered; the next read fails; the three after it are held, unanswered,
  // while they may still write into the puller's copy.
  using Held = std::pair<std::shared_ptr<rpc::Connection>, rpc::FrameHeader>;
  auto held = std::make_shared<std::vector<Held>>();
  auto seen = std::make_shared<int>(0);
  src.SetIntercept([held, seen](const std::shared_ptr<rpc::Connection>& c,
                                const rpc::FrameHeader& h, std::string_view) {
    if (h.method != proto::READ_OBJECT_CHUNK) return false;
    ++*seen;
    if (*seen == 1) return false;
    if (*seen == 2) {
      c->ReplyError(h, absl::NotFoundError("gone"));
    } else {
      held->emplace_back(c, h);
    }
    return true;
  });

  std::future<absl::Status> pull = dst.PullAsync(id, {src.address()});
  ASSERT_TRUE(WaitUntil([&] { return src.Run([&] { return held->size(); }) == 3; }));
  ASSERT_TRUE(WaitUntil([&] { return dst.stats().source_failures == 1; }));
  // Failed, but three reads into the copy are outstanding: it stays, the pull waits. The
  // node's loop has handled the failure (source_failures) and, after this empty turn,
  // anything it posted since: had the pull been finished then, it would be ready now.
  dst.Run([] { return 0; });
  EXPECT_EQ(pull.wait_for(0s), std::future_status::timeout);
  EXPECT_EQ(dst.List().size(), 1u);

  src.Run([&] {
    for (auto& [c, h] : *held) c->ReplyError(h, absl::NotFoundError("gone"));
    return 0;
  });
  ASSERT_EQ(pull.wait_for(testkit::Scaled(30s)), std::future_status::ready);
  absl::Status s = pull.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(dst.List().empty());
  EXPECT_EQ(dst.Run([&] { return dst.manager().num_active_pulls(); }), 0u);
}

TEST(ObjectManagerTest, StopMidTransferFailsThePullAndDropsTheCopyAtOnce) {
  TestNode src(8 * kMiB), dst(8 * kMiB, 64 * 1024, 4);
  const ObjectId id = RandomId<ObjectId>();
  src.Put(id, RandomBytes(kMiB, 11));
  // Only the probe is answered: the chunk reads after it stay outstanding.
  auto seen = std::make_shared<int>(0);
  src.SetIntercept(
      [seen](const std::shared_ptr<rpc::Connection>&, const rpc::FrameHeader& h, std::string_view) {
        return h.method == proto::READ_OBJECT_CHUNK && ++*seen > 1;
      });

  std::future<absl::Status> pull = dst.PullAsync(id, {src.address()});
  ASSERT_TRUE(WaitUntil([&] { return src.Run([&] { return *seen; }) == 5; }));
  dst.Run([&] {
    dst.manager().Stop();
    return 0;
  });

  ASSERT_EQ(pull.wait_for(0s), std::future_status::ready);  // Stop ran the callback
  EXPECT_EQ(pull.get().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(dst.List().empty());
}

}  // namespace
}  // namespace raio::node
