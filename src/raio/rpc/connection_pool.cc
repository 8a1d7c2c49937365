#include "raio/rpc/connection_pool.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/rpc/listener.h"

namespace raio::rpc {

std::string DescribeAddress(const proto::Address& a) {
  std::string out;
  if (!a.worker_id().empty())
    absl::StrAppend(&out, "worker ", absl::BytesToHexString(a.worker_id()), " ");
  if (!a.node_id().empty())
    absl::StrAppend(&out, "on node ", absl::BytesToHexString(a.node_id()), " ");
  if (a.port() > 0) {
    absl::StrAppend(&out, "at ", a.ip(), ":", a.port());
  } else if (!a.unix_socket().empty()) {
    absl::StrAppend(&out, "at unix:", a.unix_socket());
  } else {
    absl::StrAppend(&out, "with no endpoint");
  }
  return out;
}

proto::Address ParseAddress(std::string_view encoded) {
  proto::Address a;
  if (!a.ParseFromArray(encoded.data(), static_cast<int>(encoded.size()))) a.Clear();
  return a;
}

namespace {

class SocketConnectionFactory final : public ConnectionFactory {
 public:
  SocketConnectionFactory(std::string local_node_id, std::chrono::milliseconds timeout)
      : local_node_id_(std::move(local_node_id)), timeout_(timeout) {}

  absl::StatusOr<std::shared_ptr<Connection>> Connect(boost::asio::io_context& io,
                                                      const proto::Address& to) override {
    if (!to.unix_socket().empty() && to.node_id() == local_node_id_) {
      return ConnectUnix(io, to.unix_socket());
    }
    if (to.port() <= 0 || to.ip().empty()) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach ", DescribeAddress(to),
                       to.unix_socket().empty()
                           ? ""
                           : ": its Unix socket is on another node, and it has no TCP endpoint"));
    }
    return ConnectTcp(io, absl::StrCat(to.ip(), ":", to.port()), timeout_);
  }

 private:
  const std::string local_node_id_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<ConnectionFactory> MakeSocketConnectionFactory(
    std::string local_node_id, std::chrono::milliseconds connect_timeout) {
  return std::make_shared<SocketConnectionFactory>(std::move(local_node_id), connect_timeout);
}

ConnectionPool::ConnectionPool(boost::asio::io_context& io,
                               std::shared_ptr<ConnectionFactory> factory)
    : io_(io), factory_(std::move(factory)) {}

ConnectionPool::~ConnectionPool() {
  {
    raio::MutexLock lock(&state_->mu);
    state_->close_handlers.clear();
  }
  CloseAll(absl::CancelledError("connection pool destroyed"));
}

void ConnectionPool::OnClose(CloseHandler handler) {
  raio::MutexLock lock(&state_->mu);
  state_->close_handlers.push_back(std::move(handler));
}

std::shared_ptr<Connection> ConnectionPool::Find(const proto::Address& to) const {
  std::string key = KeyOf(to);
  raio::MutexLock lock(&state_->mu);
  auto it = state_->conns.find(key);
  if (it == state_->conns.end() || it->second->closed()) return nullptr;
  return it->second;
}

absl::StatusOr<std::shared_ptr<Connection>> ConnectionPool::Get(const proto::Address& to) {
  std::string key = KeyOf(to);
  {
    raio::MutexLock lock(&state_->mu);
    auto it = state_->conns.find(key);
    if (it != state_->conns.end() && !it->second->closed()) return it->second;
  }
  // Connect without the lock: two threads may race to the same peer; the first to
  // finish wins and the other's connection is closed unused.
  auto conn = factory_->Connect(io_, to);
  if (!conn.ok()) return conn.status();
  {
    raio::MutexLock lock(&state_->mu);
    auto& slot = state_->conns[key];
    if (slot && !slot->closed()) {
      (*conn)->Close(absl::CancelledError("a connection to this peer already exists"));
      return slot;
    }
    slot = *conn;
  }
  std::weak_ptr<State> weak = state_;
  (*conn)->Start(
      [](const std::shared_ptr<Connection>& c, const FrameHeader& h, std::string_view) {
        if (h.kind == FrameKind::kRequest) {
          c->ReplyError(h, absl::UnimplementedError("this connection serves no requests"));
        }
      },
      [weak, key](const std::shared_ptr<Connection>& c, const absl::Status& why) {
        std::shared_ptr<State> state = weak.lock();
        if (!state) return;
        std::vector<CloseHandler> handlers;
        {
          raio::MutexLock lock(&state->mu);
          auto it = state->conns.find(key);
          if (it != state->conns.end() && it->second == c) state->conns.erase(it);
          handlers = state->close_handlers;
        }
        for (const auto& handler : handlers) handler(c, why);
      });
  return *conn;
}

void ConnectionPool::CloseAll(const absl::Status& why) {
  std::unordered_map<std::string, std::shared_ptr<Connection>> conns;
  {
    raio::MutexLock lock(&state_->mu);
    conns.swap(state_->conns);
  }
  for (auto& [key, conn] : conns) conn->Close(why);
}

std::size_t ConnectionPool::size() const {
  raio::MutexLock lock(&state_->mu);
  return state_->conns.size();
}

}  // namespace raio::rpc
