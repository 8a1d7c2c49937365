// Connection: a framed, bidirectional RPC channel over a byte stream (rpc::Stream: a Unix
// or TCP socket, or whatever wraps one).
// Either side may send requests; replies are matched by request id. Writes are
// coalesced: frames queued while a write is in flight go out together in one syscall,
// and frames sent from the connection's own loop thread are flushed once per batch of
// reads. A caller on another thread writes straight to the socket when nothing is
// queued, saving a thread hop on the latency path.
//
// Bulk bytes move without copies (docs/design/rpc_raw_tails.md): a request or a
// reply may end in a raw tail (RawTail, buffers.h) that is written from the caller's memory
// with scatter-gather, and a call may name where its reply's tail goes (CallInto), which
// the connection then reads from the socket straight into that buffer. Frames too large
// for the read buffer are gathered in a buffer of their own, grown as their bytes come
// (never ahead of them), so the read buffer is neither shifted nor grown for them.
//
// Threading: reads, callbacks and handlers run on the loop thread of the io_context the
// socket belongs to. Call/CallInto/SendOneWay/Reply/Close are thread-safe. Callbacks are
// never invoked inline from Call(): a call on a closed connection fails asynchronously.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/mutex.h"
#include "raio/common/timer.h"
#include "raio/rpc/buffers.h"
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
  // Opens bytes field `number` of `length` bytes, whose value follows (a RawTail of that
  // length): the message, this suffix and the tail then parse as one message.
  FieldSuffix& AddBytesFieldHeader(int number, std::size_t length);
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
  // A reply to CallInto: the body before its tail (valid only during the callback) and how
  // many tail bytes were written at the start of the call's buffer (0 when the reply had
  // no tail: then `message` is the whole body).
  struct TailedReply {
    std::string_view message;
    std::size_t tail_bytes = 0;
  };
  // As ReplyCallback; besides, OutOfRange (a peer error) when the reply's tail is longer
  // than the buffer given, and DeadlineExceeded also when the reply stalls mid-tail (which
  // closes the connection: the rest of the stream cannot be read past it).
  using TailedReplyCallback = std::function<void(const absl::StatusOr<TailedReply>&)>;

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
  // being changed (see FieldSuffix). `tail`: raw bytes that end the frame, after the
  // suffix, written from the caller's memory (see RawTail). A reply with a tail reaches
  // `callback` whole: message and tail, contiguous. A frame over config::kMaxFrameBytes
  // is not sent: the call fails with InvalidArgument.
  void Call(uint32_t method, const google::protobuf::MessageLite& request, ReplyCallback callback,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            std::string_view suffix = {}, RawTail tail = {});
  // Sends a request whose reply's tail is read straight into `tail_buffer` (the socket's
  // bytes land there, with no copy through the connection; only what arrived with the
  // frame's header, at most one read buffer, is copied). The caller keeps `tail_buffer`
  // valid and unused until `callback` runs; the connection writes nothing into it after
  // that, nor after Close() returns on the loop thread. A reply without a tail, or an
  // error, arrives as for Call. Otherwise as Call.
  void CallInto(uint32_t method, const google::protobuf::MessageLite& request,
                std::span<char> tail_buffer, TailedReplyCallback callback,
                std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                std::string_view suffix = {});
  // Sends a frame that expects no reply. `flush_now`: as for Reply (a last word before
  // Close, which drops what is still queued, must be written at once).
  void SendOneWay(uint32_t method, const google::protobuf::MessageLite& message,
                  bool flush_now = false);
  // `flush_now`: write at once even on the loop thread instead of coalescing with the rest
  // of this batch (a worker replying after a long task must not wait for the next one).
  void Reply(const FrameHeader& request, const google::protobuf::MessageLite& reply,
             bool flush_now = false);
  // A reply of `reply`, then `suffix`, then the raw `tail` (see Call). A reply over
  // config::kMaxFrameBytes is answered with an InvalidArgument error instead.
  void ReplyWithTail(const FrameHeader& request, const google::protobuf::MessageLite& reply,
                     std::string_view suffix, RawTail tail, bool flush_now = false);
  void ReplyError(const FrameHeader& request, const absl::Status& status);

  // Closes the connection; pending calls fail with Unavailable(reason), on the loop thread.
  // Called on the loop thread it also closes the stream at once, so that no read touches a
  // CallInto buffer after it returns. Idempotent.
  void Close(const absl::Status& reason);
  bool closed() const;
  const std::string& peer_name() const { return peer_name_; }
  boost::asio::io_context& io() { return io_; }

 private:
  Connection(std::unique_ptr<Stream> stream, std::string peer_name);
  using Released = std::vector<std::shared_ptr<const void>>;
  struct PendingCall {
    ReplyCallback callback;      // a Call
    TailedReplyCallback tailed;  // or a CallInto, with its buffer:
    std::span<char> tail_buffer;
    bool receiving_tail = false;  // its reply's tail is being read into tail_buffer
    bool timed_out = false;       // its deadline passed while receiving_tail
    std::unique_ptr<raio::Timer> timer;
  };
  // What the reader does with the bytes it reads (loop thread).
  enum class ReadPhase : uint8_t {
    kFrames,  // into read_buf_, then dispatches the complete frames there
    kBody,    // the rest of one large frame into frame_buf_
    kTail,    // the rest of a reply's tail into its CallInto buffer
    kSkip,    // the rest of a frame that no one wants (a late reply), dropped
  };

  // The body length of a frame, or an error when it is over config::kMaxFrameBytes.
  absl::StatusOr<uint32_t> BodyBytes(const google::protobuf::MessageLite* message,
                                     std::size_t suffix_bytes, std::size_t tail_bytes) const;
  void StartCall(uint32_t method, const google::protobuf::MessageLite& request, PendingCall call,
                 std::optional<std::chrono::milliseconds> timeout, std::string_view suffix,
                 RawTail tail);
  void AppendFrameLocked(FrameKind kind, uint32_t method, uint64_t request_id,
                         const google::protobuf::MessageLite* message, std::size_t message_bytes,
                         std::string_view suffix, RawTail tail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KickWriteLocked(bool flush_now, Released* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops tails' keep-alives (outside mu_), on the loop thread.
  void DropReleased(Released released);
  void OnCallTimeout(uint64_t id);
  void Flush();
  void WriteLoop();
  void ReadMore();
  void OnRead(const boost::system::error_code& ec, std::size_t n);
  // Dispatches the complete frames in read_buf_ and starts the next phase; false when the
  // connection closed meanwhile.
  bool ProcessBuffered();
  // A large frame: gathers its `contiguous` bytes (of which read_buf_ holds the first)
  // in frame_buf_.
  void StartBody(const FrameHeader& h, std::size_t header_bytes, std::size_t contiguous,
                 bool to_tail);
  // A reply whose tail goes to its call's buffer, its message at hand: copies the tail
  // bytes already read, then reads the rest there (kTail). False when closed meanwhile.
  bool StartTail(const FrameHeader& h, std::string_view message);
  bool FinishTail();
  // Drops `n` more bytes of the stream, of which read_buf_ may hold the first.
  void Skip(uint64_t n);
  void Dispatch(const FrameHeader& header, std::string_view body);
  // Hands `result` (a reply body, whole, or a failure) to whichever callback `call` has.
  static void Complete(PendingCall& call, const absl::StatusOr<std::string_view>& result);
  // Fails call `id` now (it must not be receiving its tail), if it is still pending.
  void FailCall(uint64_t id, const absl::Status& status);
  void FinishClose();

  boost::asio::io_context& io_;
  const std::unique_ptr<Stream> stream_;  // its TryWrite/Shutdown/Close under mu_
  const std::string peer_name_;
  RequestHandler on_request_;
  CloseHandler on_close_;

  mutable raio::Mutex mu_;
  internal::WriteQueue out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, PendingCall> pending_ ABSL_GUARDED_BY(mu_);

  // Loop thread only.
  internal::WriteQueue writing_q_;  // the write in flight
  std::vector<boost::asio::const_buffer> write_bufs_;
  internal::ByteBuffer read_buf_;  // kReadBufferBytes, never grown
  std::size_t read_begin_ = 0;
  std::size_t read_end_ = 0;
  ReadPhase phase_ = ReadPhase::kFrames;
  // kBody: the frame, and its first frame_need_ bytes after the header (all of its body,
  // or, when frame_to_tail_, the part before the tail) gathered in frame_buf_.
  FrameHeader frame_header_;
  bool frame_to_tail_ = false;
  std::size_t frame_need_ = 0;
  internal::ByteBuffer frame_buf_;
  // kTail: call tail_call_'s buffer gets tail_size_ bytes, tail_got_ of them so far;
  // tail_message_ (in read_buf_ or frame_buf_) is the reply's message.
  uint64_t tail_call_ = 0;
  char* tail_dest_ = nullptr;
  std::size_t tail_size_ = 0;
  std::size_t tail_got_ = 0;
  std::string_view tail_message_;
  uint64_t skip_left_ = 0;  // kSkip
  bool close_handled_ = false;
};

}  // namespace raio::rpc
