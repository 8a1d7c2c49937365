// Outbox: what the CoreWorker decides to send while holding its mutex, sent after the
// mutex is released (groundwork point 6: no connect, serialization or send under it).
//
// Code holding the mutex queues sends (Call/Send, with the message kept alive by a
// shared_ptr and per-send fields in a FieldSuffix) and other work that must not run under
// it (Run: connects, replies, blocking-free closures). Whoever releases the mutex through
// an OutboxLock then drains the queue in order. Only one thread drains at a time: a
// thread that finds another draining leaves its items to it, so sends on a connection
// keep the order in which they were queued. Items queued by a drain's own sends (through
// their callbacks, which never run inline) go out in the same drain.
//
// Threading: call every method with `mu` held (DrainLocked releases it while sending).
// The methods are not annotated as requiring it: callers know `mu` under other names
// (the CoreWorker's mu_, the submitters' references), which clang's analysis cannot
// alias; the methods assert it instead.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raio/common/mutex.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/service.h"

namespace google::protobuf {
class MessageLite;
}

namespace raio::worker {

class Outbox {
 public:
  explicit Outbox(raio::Mutex& mu) : mu_(mu) {}

  // Queues a request on `conn` (see rpc::Connection::Call). `message` must not change
  // until it is sent (after the drain).
  void Call(std::shared_ptr<rpc::Connection> conn, uint32_t method,
            std::shared_ptr<const google::protobuf::MessageLite> message,
            rpc::Connection::ReplyCallback callback,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            const rpc::FieldSuffix& suffix = {});
  // Typed: queues a request of method M, whose parsed reply (or failure) reaches
  // `on_reply(absl::StatusOr<Reply>)` on the loop thread; the deadline is the method's
  // unless given (rpc/methods.h); `suffix` as for the untyped Call.
  template <proto::Method M, typename F>
  void Call(std::shared_ptr<rpc::Connection> conn,
            std::shared_ptr<const typename rpc::MethodTraits<M>::Request> request, F on_reply,
            std::optional<std::chrono::milliseconds> deadline =
                rpc::DefaultDeadline(rpc::MethodTraits<M>::kInfo),
            const rpc::FieldSuffix& suffix = {}) {
    Call(std::move(conn), M, std::move(request), rpc::TypedReply<M>(std::move(on_reply)), deadline,
         suffix);
  }
  // Queues a one-way frame.
  void Send(std::shared_ptr<rpc::Connection> conn, uint32_t method,
            std::shared_ptr<const google::protobuf::MessageLite> message);
  // Queues `fn`, run without the mutex. It may take the mutex itself (through an
  // OutboxLock: its own queued items then go out in this drain).
  void Run(std::function<void()> fn);

  // Sends everything queued, releasing `mu` while sending; returns with it held. A no-op
  // when nothing is queued or another thread is draining. Returns whether it released
  // `mu` (then what the caller read under it may have changed).
  bool DrainLocked();
  bool empty() const {
    mu_.AssertHeld();
    return items_.empty();
  }

  // Tells the thread-safety analysis that the caller holds the mutex known here as mu_.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(mu_) { mu_.AssertHeld(); }

 private:
  struct Item {
    std::shared_ptr<rpc::Connection> conn;
    uint32_t method = 0;
    bool one_way = false;
    std::shared_ptr<const google::protobuf::MessageLite> message;
    rpc::Connection::ReplyCallback callback;
    std::optional<std::chrono::milliseconds> timeout;
    rpc::FieldSuffix suffix;
    std::function<void()> fn;  // set for Run items
  };

  raio::Mutex& mu_;
  std::vector<Item> items_ ABSL_GUARDED_BY(mu_);
  std::vector<Item> sending_;  // the draining thread's only
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

// Holds `mu` like raio::MutexLock and drains `outbox` before releasing it.
class ABSL_SCOPED_LOCKABLE OutboxLock {
 public:
  OutboxLock(raio::Mutex* mu, Outbox* outbox) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu), outbox_(outbox) {
    mu_->Lock();
  }
  ~OutboxLock() ABSL_UNLOCK_FUNCTION() {
    outbox_->DrainLocked();
    mu_->Unlock();
  }
  OutboxLock(const OutboxLock&) = delete;
  OutboxLock& operator=(const OutboxLock&) = delete;

 private:
  raio::Mutex* const mu_;
  Outbox* const outbox_;
};

}  // namespace raio::worker
