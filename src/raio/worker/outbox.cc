#include "raio/worker/outbox.h"

#include <google/protobuf/message_lite.h>

namespace raio::worker {

void Outbox::Call(std::shared_ptr<rpc::Connection> conn, uint32_t method,
                  std::shared_ptr<const google::protobuf::MessageLite> message,
                  rpc::Connection::ReplyCallback callback,
                  std::optional<std::chrono::milliseconds> timeout,
                  const rpc::FieldSuffix& suffix) {
  mu_.AssertHeld();
  Item& item = items_.emplace_back();
  item.conn = std::move(conn);
  item.method = method;
  item.message = std::move(message);
  item.callback = std::move(callback);
  item.timeout = timeout;
  item.suffix = suffix;
}

void Outbox::Send(std::shared_ptr<rpc::Connection> conn, uint32_t method,
                  std::shared_ptr<const google::protobuf::MessageLite> message) {
  mu_.AssertHeld();
  Item& item = items_.emplace_back();
  item.conn = std::move(conn);
  item.method = method;
  item.one_way = true;
  item.message = std::move(message);
}

void Outbox::Run(std::function<void()> fn) {
  mu_.AssertHeld();
  items_.emplace_back().fn = std::move(fn);
}

// Releases and retakes the mutex it was called with, which the analysis cannot follow
// through the asserted alias.
bool Outbox::DrainLocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  mu_.AssertHeld();
  if (draining_ || items_.empty()) return false;
  draining_ = true;
  while (!items_.empty()) {
    sending_.swap(items_);
    mu_.Unlock();
    for (Item& item : sending_) {
      if (item.fn) {
        item.fn();
      } else if (item.one_way) {
        item.conn->SendOneWay(item.method, *item.message);
      } else {
        item.conn->Call(item.method, *item.message, std::move(item.callback), item.timeout,
                        item.suffix.view());
      }
    }
    // Messages and closures are released here too, without the mutex.
    sending_.clear();
    mu_.Lock();
  }
  draining_ = false;
  return true;
}

}  // namespace raio::worker
