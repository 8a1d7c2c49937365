// Connection: a framed, bidirectional RPC channel over a byte stream (rpc::Stream: a Unix
// or TCP socket, or whatever wraps one).
// Either side may send requests; replies are matched by request id. Writes are
// coalesced: frames queued while a write is in flight go out together in one syscall,
// and frames sent from the connection's own loop thread are flushed once per batch of
// reads. A caller on another thread writes straight to the socket when nothing is
// queued, saving a thread hop on the latency path.
//
// Threading: reads, callbacks and handlers run on the loop thread of the io_context the
// socket belongs to. Call/SendOneWay/Reply/Close are thread-safe. Callbacks are never
// invoked inline from Call(): a call on a closed connection fails asynchronously.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/mutex.h"
#include "raio/common/timer.h"
#include "raio/rpc/frame.h"
#include "raio/rpc/stream.h"

namespace google::protobuf {
class MessageLite;
}

namespace raio::rpc {

// Encoded fields to follow a serialized message (Connection::Call's `suffix`), at most
// kCapacity bytes: e.g. the attempt number of a queued PushTaskRequest, or the caller's
// address pre-encoded once as `spec { caller_address {...} }` (protobuf merges an embedded
// message field that appears twice, so it lands inside the request's spec).
class FieldSuffix {
 public:
  static constexpr std::size_t kCapacity = 320;
  // Appends field `number` with varint `value`.
  FieldSuffix& Add(int number, uint64_t value);
  // Appends already-encoded fields.
  FieldSuffix& AddEncoded(std::string_view fields);
  std::string_view view() const { return {buf_, size_}; }

 private:
  char buf_[kCapacity];
  std::size_t size_ = 0;
};

// A call's failure is either the transport's (the connection closed, a write failed, no
// reply in time: the peer may be gone) or the peer's (it answered with an error frame, or
// with a reply that does not parse: it is alive and refused or botched this one call).
// Callers must tell them apart: a worker that answers PUSH_TASK with an error fails that
// task, it has not died. PeerError marks a status as the peer's (a payload, set only on
// the failure path); IsPeerError reads the mark.
absl::Status PeerError(absl::Status status);
bool IsPeerError(const absl::Status& status);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Handles an incoming request or one-way frame. `body` is valid only during the call.
  // Reply later with Reply()/ReplyError() using header.request_id (requests only).
  using RequestHandler = std::function<void(const std::shared_ptr<Connection>&,
                                            const FrameHeader& header, std::string_view body)>;
  // Called once, on the loop thread, when the connection closes for any reason.
  using CloseHandler =
      std::function<void(const std::shared_ptr<Connection>&, const absl::Status& reason)>;
  // Receives the reply body (valid only during the call) or the failure: Unavailable
  // when the connection closed, DeadlineExceeded on timeout, or the peer's error status
  // (IsPeerError: true for that one only).
  using ReplyCallback = std::function<void(const absl::StatusOr<std::string_view>&)>;

  // Over a connected socket (a SocketStream), or over any Stream.
  static std::shared_ptr<Connection> Create(Socket socket, std::string peer_name);
  static std::shared_ptr<Connection> Create(std::unique_ptr<Stream> stream, std::string peer_name);
  ~Connection();

  // Starts reading. Call once; handlers may be empty.
  void Start(RequestHandler on_request, CloseHandler on_close);

  // Sends a request; `callback` runs on the loop thread with the reply or failure.
  // `timeout` nullopt means wait for as long as the connection lives. `suffix`: encoded
  // fields appended to the serialized request (protobuf merges them: a later scalar wins),
  // so that a queued message is sent with per-send fields (attempt, sequence) without
  // being changed (see FieldSuffix).
  void Call(uint32_t method, const google::protobuf::MessageLite& request, ReplyCallback callback,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            std::string_view suffix = {});
  // Sends a frame that expects no reply.
  void SendOneWay(uint32_t method, const google::protobuf::MessageLite& message);
  // `flush_now`: write at once even on the loop thread instead of coalescing with the rest
  // of this batch (a worker replying after a long task must not wait for the next one).
  void Reply(const FrameHeader& request, const google::protobuf::MessageLite& reply,
             bool flush_now = false);
  void ReplyError(const FrameHeader& request, const absl::Status& status);

  // Closes the socket; pending calls fail with Unavailable(reason). Idempotent.
  void Close(const absl::Status& reason);
  bool closed() const;
  const std::string& peer_name() const { return peer_name_; }
  boost::asio::io_context& io() { return io_; }

 private:
  Connection(std::unique_ptr<Stream> stream, std::string peer_name);
  void AppendFrameLocked(FrameKind kind, uint32_t method, uint64_t request_id,
                         const google::protobuf::MessageLite* message, std::string_view suffix = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KickWriteLocked(bool flush_now = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Flush();
  void WriteLoop();
  void ReadMore();
  void OnRead(const boost::system::error_code& ec, std::size_t n);
  void Dispatch(const FrameHeader& header, std::string_view body);
  void FinishClose();

  struct PendingCall {
    ReplyCallback callback;
    std::unique_ptr<raio::Timer> timer;
  };

  boost::asio::io_context& io_;
  const std::unique_ptr<Stream> stream_;  // its TryWrite/Shutdown/Close under mu_
  const std::string peer_name_;
  RequestHandler on_request_;
  CloseHandler on_close_;

  mutable raio::Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, PendingCall> pending_ ABSL_GUARDED_BY(mu_);

  // Loop thread only.
  std::string write_buf_;
  std::string read_buf_;
  std::size_t read_begin_ = 0;
  std::size_t read_end_ = 0;
  bool close_handled_ = false;
};

}  // namespace raio::rpc
