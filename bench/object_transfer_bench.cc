// object_transfer_bench: node-to-node object transfer (node/object_manager) against its
// floor, a plain TCP stream, both over loopback in the same run.
//
//   build-release/bench/object_transfer_bench [--bytes=N] [--reps=N] [--chunk-bytes=N]
//                                             [--in-flight=N]
//
// Measures
//   - floor: a TCP socket pair (TCP_NODELAY, as raio's connections) streaming --bytes
//     (default 1 GiB) from a warm buffer of that size into another (the same memory traffic
//     as a transfer between two stores), 8 MiB per send/recv call, sender and receiver on
//     their own threads; and the same with the receiver reading into one reused 8 MiB
//     buffer (cache-resident: an upper bound no store can reach);
//   - transfer: two ObjectManagers, each on its own loop with its own shared-memory store,
//     one pulling a --bytes object from the other over 127.0.0.1 TCP; the first pull (into
//     never-touched store memory: first-touch page faults) is reported apart, then --reps
//     (default 5) pulls into warm memory, the copy deleted after each.
// Prints best and median GB/s (10^9 bytes/s) of each and the ratio of the transfer's to
// the floor's.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/process.h"
#include "raio/node/object_manager/object_manager.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "object_transfer_bench: %s\n", what.c_str());
  std::exit(1);
}

double Gbps(uint64_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

// One plain TCP stream of `bytes`; returns seconds from the first send to the last byte
// received. `recv_window`: the receiver's buffer (bytes; it reuses it when smaller).
double TcpStreamSeconds(const std::vector<char>& src, std::vector<char>& dst,
                        uint64_t recv_window) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die("cannot listen on 127.0.0.1");
  }
  const uint64_t total = src.size();
  constexpr uint64_t kCall = 8 << 20;
  std::promise<Clock::time_point> started;
  auto start = started.get_future();
  std::thread sender([&] {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Die("connect");
    started.set_value(Clock::now());
    for (uint64_t at = 0; at < total;) {
      ssize_t n = send(s, src.data() + at, std::min(kCall, total - at), 0);
      if (n <= 0) Die("send");
      at += static_cast<uint64_t>(n);
    }
    close(s);
  });
  int r = accept(listener, nullptr, nullptr);
  if (r < 0) Die("accept");
  int one = 1;
  setsockopt(r, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  uint64_t got = 0;
  while (got < total) {
    const uint64_t at = recv_window >= total ? got : got % recv_window;
    const uint64_t room = std::min({kCall, total - got, recv_window - at});
    ssize_t n = recv(r, dst.data() + at, room, 0);
    if (n <= 0) Die("recv");
    got += static_cast<uint64_t>(n);
  }
  const auto end = Clock::now();
  sender.join();
  close(r);
  close(listener);
  return std::chrono::duration<double>(end - start.get()).count();
}

// A node: loop, store, object manager, TCP listener serving READ_OBJECT_CHUNK.
class BenchNode {
 public:
  BenchNode(uint64_t capacity, const std::string& dir, const raio::node::ObjectManager::Options& o)
      : loop_("bench-node") {
    auto store = raio::node::ObjectStoreService::Create(capacity, dir + "/spill", 0);
    if (!store.ok()) Die(std::string(store.status().message()));
    store_ = *std::move(store);
    manager_ = std::make_unique<raio::node::ObjectManager>(loop_.io(), *store_, o);
    manager_->RegisterHandlers(service_);
    auto listener = raio::rpc::Listener::ListenTcp(
        loop_.io(), "127.0.0.1", 0, [this](std::shared_ptr<raio::rpc::Connection> c) {
          conns_.push_back(c);
          c->Start(
              [this](const std::shared_ptr<raio::rpc::Connection>& conn,
                     const raio::rpc::FrameHeader& h, std::string_view body) {
                if (!service_.Dispatch(conn, h, body)) service_.RejectUnknown(conn, h);
              },
              nullptr);
        });
    if (!listener.ok()) Die(std::string(listener.status().message()));
    listener_ = *std::move(listener);
    loop_.Start();
  }
  ~BenchNode() {
    Run([this] {
      manager_.reset();
      listener_->Stop();
      for (auto& c : conns_) c->Close(absl::CancelledError("bench over"));
      return 0;
    });
    loop_.Stop();
  }
  template <typename F>
  auto Run(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    loop_.Post([&task] { task(); });
    return result.get();
  }
  raio::proto::Address address() const {
    raio::proto::Address a;
    a.set_ip("127.0.0.1");
    a.set_port(listener_->port());
    return a;
  }
  void Put(const raio::ObjectId& id, uint64_t size) {
    absl::Status s = Run([&] {
      absl::StatusOr<raio::node::ObjectLocation> loc = absl::UnknownError("no answer");
      store_->CreateForNode(id, size, raio::node::CopyKind::kPrimary,
                            [&loc](auto l) { loc = std::move(l); });
      if (!loc.ok()) return loc.status();
      uint8_t* p = store_->shm_base() + loc->offset;
      for (uint64_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(i * 131 + (i >> 20));
      return store_->SealForNode(id);
    });
    if (!s.ok()) Die(std::string(s.message()));
  }
  // Seconds from Pull to its callback.
  double PullSeconds(const raio::ObjectId& id, const raio::proto::Address& from) {
    std::promise<absl::Status> done;
    auto result = done.get_future();
    Clock::time_point start = Clock::now();
    Run([&] {
      start = Clock::now();
      manager_->Pull(id, {from}, [&done](const absl::Status& s) { done.set_value(s); });
      return 0;
    });
    absl::Status s = result.get();
    const auto end = Clock::now();
    if (!s.ok()) Die(absl::StrCat("pull failed: ", s.ToString()));
    return std::chrono::duration<double>(end - start).count();
  }
  void Delete(const raio::ObjectId& id) {
    Run([&] {
      store_->DeleteObject(id);
      return 0;
    });
  }
  uint64_t Checksum(const raio::ObjectId& id) {
    return Run([&] {
      auto loc = store_->PinForNode(id);
      if (!loc.ok()) Die("no pulled copy");
      uint64_t h = 0;
      const uint8_t* p = store_->shm_base() + loc->offset;
      for (uint64_t i = 0; i < loc->size; i += 4096) h = h * 31 + p[i];
      store_->UnpinForNode(id);
      return h;
    });
  }

 private:
  raio::EventLoop loop_;
  std::unique_ptr<raio::node::ObjectStoreService> store_;
  raio::rpc::Service service_{"bench-node"};
  std::unique_ptr<raio::node::ObjectManager> manager_;
  std::unique_ptr<raio::rpc::Listener> listener_;
  std::vector<std::shared_ptr<raio::rpc::Connection>> conns_;
};

struct Figures {
  double best = 0;
  double median = 0;
};
Figures Summarize(std::vector<double> gbps) {
  std::sort(gbps.begin(), gbps.end());
  return {gbps.back(), gbps[gbps.size() / 2]};
}

uint64_t Flag(int argc, char** argv, const std::string& name, uint64_t def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) return std::stoull(a.substr(prefix.size()));
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h" || a.rfind("--", 0) != 0) {
      std::printf("usage: %s [--bytes=N] [--reps=N] [--chunk-bytes=N] [--in-flight=N]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  const uint64_t bytes = Flag(argc, argv, "bytes", 1ull << 30);
  const int reps = static_cast<int>(std::max<uint64_t>(1, Flag(argc, argv, "reps", 5)));
  raio::node::ObjectManager::Options options;
  options.connection_factory = raio::rpc::MakeSocketConnectionFactory("", 5s);
  options.chunk_bytes = Flag(argc, argv, "chunk-bytes", 0);
  options.chunks_in_flight = static_cast<int>(Flag(argc, argv, "in-flight", 0));
  const uint64_t chunk =
      options.chunk_bytes ? options.chunk_bytes : raio::config::object_transfer_chunk_bytes();
  const int64_t in_flight = options.chunks_in_flight
                                ? options.chunks_in_flight
                                : raio::config::object_transfer_chunks_in_flight();

  // The floor and the transfer alternate, rep by rep, so that whatever else runs on the
  // machine weighs on both alike.
  std::vector<double> floor_full, floor_small, pulls;
  double cold = 0;
  {
    std::vector<char> src_buf(bytes), dst_buf(bytes);
    for (uint64_t i = 0; i < bytes; i += 4096) src_buf[i] = static_cast<char>(i);
    std::memset(dst_buf.data(), 1, dst_buf.size());
    const std::string dir = raio::MakeTempDir("om-bench");
    const uint64_t capacity = bytes + (64 << 20);
    BenchNode src(capacity, dir + "/src", options), dst(capacity, dir + "/dst", options);
    const raio::ObjectId id = raio::RandomId<raio::ObjectId>();
    src.Put(id, bytes);
    cold = Gbps(bytes, dst.PullSeconds(id, src.address()));
    if (dst.Checksum(id) != src.Checksum(id)) Die("the pulled copy differs from the source");
    dst.Delete(id);
    for (int i = 0; i < reps; ++i) {
      floor_full.push_back(Gbps(bytes, TcpStreamSeconds(src_buf, dst_buf, bytes)));
      pulls.push_back(Gbps(bytes, dst.PullSeconds(id, src.address())));
      dst.Delete(id);
      floor_small.push_back(Gbps(bytes, TcpStreamSeconds(src_buf, dst_buf, 8 << 20)));
    }
    raio::RemoveTree(dir);
  }

  const Figures full = Summarize(floor_full), small = Summarize(floor_small),
                pull = Summarize(pulls);
  std::printf(
      "object transfer over loopback TCP: %.3f GiB, %llu KiB chunks, %lld in flight, "
      "%d reps\n",
      static_cast<double>(bytes) / (1ull << 30), static_cast<unsigned long long>(chunk >> 10),
      static_cast<long long>(in_flight), reps);
  std::printf("%-58s %10s %10s %10s\n", "", "best GB/s", "med GB/s", "vs floor");
  std::printf("%-58s %10.2f %10.2f %10s\n", "floor: TCP stream, buffer to buffer of the full size",
              full.best, full.median, "1.00");
  std::printf("%-58s %10.2f %10.2f %10.2f\n", "  (receiver reusing one 8 MiB buffer)", small.best,
              small.median, small.median / full.median);
  std::printf("%-58s %10.2f %10.2f %10.2f\n", "ObjectManager pull, store to store (warm memory)",
              pull.best, pull.median, pull.median / full.median);
  std::printf("%-58s %10.2f %10s %10.2f\n", "  first pull (untouched store memory)", cold, "",
              cold / full.median);
  std::printf("ratio pull / floor (medians): %.2f; vs the 8 MiB-buffer stream: %.2f\n",
              pull.median / full.median, pull.median / small.median);
  return 0;
}
