#include "raio/testkit/fake_peer.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/generic/stream_protocol.hpp>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "raio/testkit/time_scale.h"

namespace raio::testkit {

std::string MethodName(uint32_t method) {
  const rpc::MethodInfo* info = rpc::FindMethod(method);
  return info != nullptr ? std::string(info->name) : absl::StrCat("method ", method);
}

void CallLog::Add(std::string entry) {
  raio::MutexLock lock(&mu_);
  entries_.push_back(std::move(entry));
}

std::vector<std::string> CallLog::entries() const {
  raio::MutexLock lock(&mu_);
  return entries_;
}

std::vector<std::string> CallLog::Take() {
  raio::MutexLock lock(&mu_);
  return std::exchange(entries_, {});
}

struct FakePeer::State {
  std::string name;
  CallLog* call_log = nullptr;
  raio::Mutex mu;
  raio::CondVar cv;
  std::deque<ReceivedFrame> pending ABSL_GUARDED_BY(mu);
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  std::map<uint32_t, FrameHandler> auto_replies ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<rpc::Connection>> conns ABSL_GUARDED_BY(mu);

  void OnFrame(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
               std::string_view body) {
    const std::string method = MethodName(h.method);
    if (call_log != nullptr) call_log->Add(absl::StrCat(name, " ", method));
    FrameHandler auto_reply;
    {
      raio::MutexLock lock(&mu);
      log.push_back(method);
      auto it = auto_replies.find(h.method);
      if (it == auto_replies.end()) {
        pending.push_back(ReceivedFrame{h, std::string(body), conn});
        cv.SignalAll();
        return;
      }
      auto_reply = it->second;
    }
    auto_reply(conn, h, body);  // without the mutex: it writes to the socket
  }
  void OnClose(const std::shared_ptr<rpc::Connection>& conn) {
    raio::MutexLock lock(&mu);
    conns.erase(std::remove(conns.begin(), conns.end(), conn), conns.end());
  }
};

FakePeer::FakePeer(std::string name, boost::asio::io_context& io, CallLog* log)
    : name_(std::move(name)), io_(io), state_(std::make_shared<State>()) {
  state_->name = name_;
  state_->call_log = log;
}

FakePeer::~FakePeer() {
  StopListening();
  DropConnections();
}

void FakePeer::Serve(std::shared_ptr<rpc::Connection> conn) {
  {
    raio::MutexLock lock(&state_->mu);
    state_->conns.push_back(conn);
  }
  std::weak_ptr<State> weak = state_;
  conn->Start(
      [weak](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
             std::string_view body) {
        if (auto state = weak.lock()) state->OnFrame(c, h, body);
      },
      [weak](const std::shared_ptr<rpc::Connection>& c, const absl::Status&) {
        if (auto state = weak.lock()) state->OnClose(c);
      });
}

std::shared_ptr<rpc::Connection> FakePeer::Connect(rpc::Connection::RequestHandler on_request,
                                                   rpc::Connection::CloseHandler on_close) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    ADD_FAILURE() << "socketpair: " << std::strerror(errno);
    return nullptr;
  }
  const boost::asio::generic::stream_protocol unix_stream(AF_UNIX, 0);
  auto server = rpc::Connection::Create(rpc::Socket(io_, unix_stream, fds[1]),
                                        absl::StrCat("client of ", name_));
  auto client = rpc::Connection::Create(rpc::Socket(io_, unix_stream, fds[0]), name_);
  Serve(std::move(server));
  client->Start(std::move(on_request), std::move(on_close));
  return client;
}

absl::Status FakePeer::ListenUnix(const std::string& path) {
  auto listener = rpc::Listener::ListenUnix(
      io_, path, [this](std::shared_ptr<rpc::Connection> c) { Serve(std::move(c)); });
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  return absl::OkStatus();
}

absl::Status FakePeer::ListenTcp(int port) {
  auto listener = rpc::Listener::ListenTcp(
      io_, "127.0.0.1", port, [this](std::shared_ptr<rpc::Connection> c) { Serve(std::move(c)); });
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  return absl::OkStatus();
}

int FakePeer::port() const { return listener_ ? listener_->port() : 0; }

void FakePeer::StopListening() {
  if (listener_) listener_->Stop();
}

void FakePeer::DropConnections() {
  std::vector<std::shared_ptr<rpc::Connection>> conns;
  {
    raio::MutexLock lock(&state_->mu);
    conns.swap(state_->conns);
  }
  for (auto& conn : conns) conn->Close(absl::UnavailableError(name_ + " dropped the connection"));
}

int FakePeer::num_connections() const {
  raio::MutexLock lock(&state_->mu);
  return static_cast<int>(state_->conns.size());
}

std::vector<std::shared_ptr<rpc::Connection>> FakePeer::connections() const {
  raio::MutexLock lock(&state_->mu);
  return state_->conns;
}

void FakePeer::SetAutoReply(proto::Method method, FrameHandler handler) {
  raio::MutexLock lock(&state_->mu);
  state_->auto_replies[method] = std::move(handler);
}

std::optional<ReceivedFrame> FakePeer::TakeFrame(proto::Method expected) {
  raio::MutexLock lock(&state_->mu);
  auto& pending = state_->pending;
  if (pending.empty()) {
    ADD_FAILURE() << name_ << " has no call waiting; expected " << MethodName(expected);
    return std::nullopt;
  }
  if (pending.front().header.method != static_cast<uint32_t>(expected)) {
    std::vector<std::string> methods;
    for (const auto& f : pending) methods.push_back(MethodName(f.header.method));
    ADD_FAILURE() << name_ << ": expected " << MethodName(expected) << ", waiting are ["
                  << absl::StrJoin(methods, ", ") << "]";
    return std::nullopt;
  }
  ReceivedFrame frame = std::move(pending.front());
  pending.pop_front();
  return frame;
}

bool FakePeer::HasCall() const {
  raio::MutexLock lock(&state_->mu);
  return !state_->pending.empty();
}

std::vector<std::string> FakePeer::PendingMethods() const {
  raio::MutexLock lock(&state_->mu);
  std::vector<std::string> methods;
  for (const auto& f : state_->pending) methods.push_back(MethodName(f.header.method));
  return methods;
}

std::vector<std::string> FakePeer::TakeLog() {
  raio::MutexLock lock(&state_->mu);
  return std::exchange(state_->log, {});
}

bool FakePeer::WaitForCall(std::chrono::milliseconds timeout) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(Scaled(timeout));
  raio::MutexLock lock(&state_->mu);
  while (state_->pending.empty()) {
    if (state_->cv.WaitWithDeadline(&state_->mu, deadline)) break;
  }
  return !state_->pending.empty();
}

}  // namespace raio::testkit
