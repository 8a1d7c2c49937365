#include "raio/rpc/connection.h"

#include <google/protobuf/message_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "absl/strings/cord.h"
#include "raio/common.pb.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"

namespace raio::rpc {

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
// The payload that marks a status as the peer's answer (PeerError).
constexpr char kPeerErrorPayload[] = "raio.dev/peer-error";
}  // namespace

absl::Status PeerError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPeerErrorPayload, absl::Cord());
  return status;
}

bool IsPeerError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kPeerErrorPayload).has_value();
}

std::shared_ptr<Connection> Connection::Create(Socket socket, std::string peer_name) {
  return Create(std::make_unique<SocketStream>(std::move(socket)), std::move(peer_name));
}

std::shared_ptr<Connection> Connection::Create(std::unique_ptr<Stream> stream,
                                               std::string peer_name) {
  return std::shared_ptr<Connection>(new Connection(std::move(stream), std::move(peer_name)));
}

Connection::Connection(std::unique_ptr<Stream> stream, std::string peer_name)
    : io_(stream->io()), stream_(std::move(stream)), peer_name_(std::move(peer_name)) {}

Connection::~Connection() = default;

void Connection::Start(RequestHandler on_request, CloseHandler on_close) {
  on_request_ = std::move(on_request);
  on_close_ = std::move(on_close);
  read_buf_.resize(kReadChunk);
  boost::asio::post(io_, [self = shared_from_this()] { self->ReadMore(); });
}

void Connection::AppendFrameLocked(FrameKind kind, uint32_t method, uint64_t request_id,
                                   const google::protobuf::MessageLite* message,
                                   std::string_view suffix) {
  std::size_t size = message ? message->ByteSizeLong() : 0;
  std::size_t body = size + suffix.size();
  std::size_t at = out_.size();
  out_.resize(at + kFrameHeaderBytes + body);
  FrameHeader h{kind, method, request_id, static_cast<uint32_t>(body)};
  EncodeFrameHeader(h, out_.data() + at);
  char* p = out_.data() + at + kFrameHeaderBytes;
  if (message) message->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p));
  if (!suffix.empty()) std::memcpy(p + size, suffix.data(), suffix.size());
}

FieldSuffix& FieldSuffix::AddEncoded(std::string_view fields) {
  RAIO_CHECK(size_ + fields.size() <= kCapacity);
  std::memcpy(buf_ + size_, fields.data(), fields.size());
  size_ += fields.size();
  return *this;
}

FieldSuffix& FieldSuffix::Add(int number, uint64_t value) {
  using google::protobuf::internal::WireFormatLite;
  RAIO_CHECK(size_ + 15 <= kCapacity);  // a tag and a varint: at most 5 + 10 bytes
  auto* p = reinterpret_cast<uint8_t*>(buf_ + size_);
  uint8_t* end = WireFormatLite::WriteUInt64ToArray(number, value, p);
  size_ += static_cast<std::size_t>(end - p);
  return *this;
}

void Connection::KickWriteLocked(bool flush_now) {
  if (writing_ || out_.empty()) return;
  if (!flush_now && io_.get_executor().running_in_this_thread()) {
    // Coalesce: everything sent while this loop iteration runs goes out in one write.
    if (!flush_posted_) {
      flush_posted_ = true;
      boost::asio::post(io_, [self = shared_from_this()] { self->Flush(); });
    }
    return;
  }
  // Another thread (or an urgent reply) with nothing queued: write directly, skipping a
  // thread hop.
  // An error is left for the loop thread's own write to notice.
  ssize_t n = stream_->TryWrite(out_.data(), out_.size());
  if (n > 0) out_.erase(0, static_cast<std::size_t>(n));
  if (out_.empty()) return;
  writing_ = true;
  boost::asio::post(io_, [self = shared_from_this()] { self->WriteLoop(); });
}

void Connection::Flush() {
  {
    raio::MutexLock lock(&mu_);
    flush_posted_ = false;
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
  }
  WriteLoop();
}

void Connection::WriteLoop() {
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
    if (out_.empty()) {
      writing_ = false;
      return;
    }
    write_buf_.clear();
    write_buf_.swap(out_);
  }
  stream_->AsyncWrite(
      write_buf_.data(), write_buf_.size(),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        if (ec) {
          self->Close(absl::UnavailableError("write failed: " + ec.message()));
          return;
        }
        self->WriteLoop();
      });
}

void Connection::Call(uint32_t method, const google::protobuf::MessageLite& request,
                      ReplyCallback callback, std::optional<std::chrono::milliseconds> timeout,
                      std::string_view suffix) {
  raio::MutexLock lock(&mu_);
  if (closed_) {
    boost::asio::post(io_, [cb = std::move(callback), peer = peer_name_] {
      cb(absl::UnavailableError("connection to " + peer + " is closed"));
    });
    return;
  }
  uint64_t id = next_request_id_++;
  PendingCall& call = pending_[id];
  call.callback = std::move(callback);
  if (timeout) {
    call.timer = std::make_unique<raio::Timer>(io_);
    call.timer->expires_after(*timeout);
    call.timer->async_wait([self = shared_from_this(), id](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled: the reply came
      ReplyCallback cb;
      {
        raio::MutexLock lock(&self->mu_);
        auto it = self->pending_.find(id);
        if (it == self->pending_.end()) return;
        cb = std::move(it->second.callback);
        self->pending_.erase(it);
      }
      cb(absl::DeadlineExceededError("no reply from " + self->peer_name_ + " in time"));
    });
  }
  AppendFrameLocked(FrameKind::kRequest, method, id, &request, suffix);
  KickWriteLocked();
}

void Connection::SendOneWay(uint32_t method, const google::protobuf::MessageLite& message) {
  raio::MutexLock lock(&mu_);
  if (closed_) return;
  AppendFrameLocked(FrameKind::kOneWay, method, 0, &message);
  KickWriteLocked();
}

void Connection::Reply(const FrameHeader& request, const google::protobuf::MessageLite& reply,
                       bool flush_now) {
  raio::MutexLock lock(&mu_);
  if (closed_) return;
  AppendFrameLocked(FrameKind::kReply, request.method, request.request_id, &reply);
  KickWriteLocked(flush_now);
}

void Connection::ReplyError(const FrameHeader& request, const absl::Status& status) {
  proto::RpcStatus s;
  s.set_code(static_cast<int32_t>(status.code()));
  s.set_message(std::string(status.message()));
  raio::MutexLock lock(&mu_);
  if (closed_) return;
  AppendFrameLocked(FrameKind::kError, request.method, request.request_id, &s);
  KickWriteLocked();
}

bool Connection::closed() const {
  raio::MutexLock lock(&mu_);
  return closed_;
}

void Connection::Close(const absl::Status& reason) {
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = reason;
    stream_->Shutdown();
  }
  boost::asio::post(io_, [self = shared_from_this()] { self->FinishClose(); });
}

void Connection::FinishClose() {
  if (close_handled_) return;
  close_handled_ = true;
  std::unordered_map<uint64_t, PendingCall> pending;
  absl::Status reason;
  {
    raio::MutexLock lock(&mu_);
    reason = close_reason_;
    pending.swap(pending_);
    stream_->Close();
  }
  for (auto& [id, call] : pending) {
    if (call.timer) call.timer->cancel();
    call.callback(absl::UnavailableError("connection to " + peer_name_ +
                                         " closed: " + std::string(reason.message())));
  }
  if (on_close_) on_close_(shared_from_this(), reason);
  on_request_ = nullptr;
  on_close_ = nullptr;
}

void Connection::ReadMore() {
  if (read_end_ == read_buf_.size()) {
    // Make room: move the partial frame to the front, grow if it does not fit.
    if (read_begin_ > 0) {
      std::memmove(read_buf_.data(), read_buf_.data() + read_begin_, read_end_ - read_begin_);
      read_end_ -= read_begin_;
      read_begin_ = 0;
    }
    if (read_end_ == read_buf_.size()) read_buf_.resize(read_buf_.size() * 2);
  }
  stream_->AsyncReadSome(read_buf_.data() + read_end_, read_buf_.size() - read_end_,
                         [self = shared_from_this()](const boost::system::error_code& ec,
                                                     std::size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(const boost::system::error_code& ec, std::size_t n) {
  if (ec) {
    // A local Close() that woke this read keeps its own reason (Close is a no-op then).
    Close(ec == boost::asio::error::eof ? absl::UnavailableError("peer closed the connection")
                                        : absl::UnavailableError("read failed: " + ec.message()));
    FinishClose();
    return;
  }
  read_end_ += n;
  while (read_end_ - read_begin_ >= kFrameHeaderBytes) {
    FrameHeader h;
    absl::Status s = DecodeFrameHeader(read_buf_.data() + read_begin_, config::kMaxFrameBytes, &h);
    if (!s.ok()) {
      RAIO_LOG_WARN("closing connection to {}: {}", peer_name_, s.message());
      Close(s);
      return;
    }
    std::size_t total = kFrameHeaderBytes + h.body_bytes;
    // An incomplete frame waits for more bytes. ReadMore compacts and doubles the buffer
    // only once it is full, so memory follows the bytes that came, never the length a
    // header claims: growing to that length up front let 20 bytes from a peer take up to
    // kMaxFrameBytes (512 MiB) per connection.
    if (read_end_ - read_begin_ < total) break;
    std::string_view body(read_buf_.data() + read_begin_ + kFrameHeaderBytes, h.body_bytes);
    read_begin_ += total;
    Dispatch(h, body);
    if (close_handled_) return;
  }
  if (read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
  }
  ReadMore();
}

void Connection::Dispatch(const FrameHeader& h, std::string_view body) {
  switch (h.kind) {
    case FrameKind::kReply:
    case FrameKind::kError: {
      PendingCall call;
      {
        raio::MutexLock lock(&mu_);
        auto it = pending_.find(h.request_id);
        if (it == pending_.end()) return;  // timed out earlier
        call = std::move(it->second);
        pending_.erase(it);
      }
      if (call.timer) call.timer->cancel();
      if (h.kind == FrameKind::kReply) {
        call.callback(body);
      } else {
        proto::RpcStatus s;
        // An error frame carrying OK is malformed too: StatusOr refuses an OK status, and
        // Debian's abseil aborts the process on one.
        if (!s.ParseFromArray(body.data(), static_cast<int>(body.size())) ||
            s.code() == static_cast<int32_t>(absl::StatusCode::kOk)) {
          call.callback(PeerError(absl::InternalError("malformed error reply from " + peer_name_)));
        } else {
          call.callback(
              PeerError(absl::Status(static_cast<absl::StatusCode>(s.code()), s.message())));
        }
      }
      return;
    }
    case FrameKind::kRequest:
    case FrameKind::kOneWay:
      if (on_request_) on_request_(shared_from_this(), h, body);
      return;
  }
}

}  // namespace raio::rpc
