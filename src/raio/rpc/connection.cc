#include "raio/rpc/connection.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "raio/common.pb.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"

namespace raio::rpc {

namespace {
// Frames that fit are read into and dispatched from one buffer of this size; larger ones
// are gathered in a buffer of their own (frame_buf_), and a reply's tail that has a
// CallInto buffer goes there.
constexpr std::size_t kReadBufferBytes = 64 * 1024;
// frame_buf_ is kept for the next large frame up to this capacity, freed above it.
constexpr std::size_t kKeepFrameBufferBytes = 64u << 20;
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

FieldSuffix& FieldSuffix::AddBytesFieldHeader(int number, std::size_t length) {
  using google::protobuf::internal::WireFormatLite;
  RAIO_CHECK(size_ + 15 <= kCapacity);
  auto* p = reinterpret_cast<uint8_t*>(buf_ + size_);
  uint8_t* end =
      WireFormatLite::WriteTagToArray(number, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, p);
  end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(length, end);
  size_ += static_cast<std::size_t>(end - p);
  return *this;
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
  read_buf_.Reserve(kReadBufferBytes);
  boost::asio::post(io_, [self = shared_from_this()] { self->ReadMore(); });
}

// --- Writing ---

absl::StatusOr<uint32_t> Connection::BodyBytes(const google::protobuf::MessageLite* message,
                                               std::size_t suffix_bytes,
                                               std::size_t tail_bytes) const {
  const uint64_t body = (message ? message->ByteSizeLong() : 0) + suffix_bytes + tail_bytes;
  if (body > config::kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a frame of ", body, " bytes for ", peer_name_,
                                                   " is over the limit of ", config::kMaxFrameBytes,
                                                   " bytes"));
  }
  return static_cast<uint32_t>(body);
}

void Connection::AppendFrameLocked(FrameKind kind, uint32_t method, uint64_t request_id,
                                   const google::protobuf::MessageLite* message,
                                   std::size_t message_bytes, std::string_view suffix,
                                   RawTail tail) {
  const FrameHeader h{kind, method, request_id,
                      static_cast<uint32_t>(message_bytes + suffix.size() + tail.data.size()),
                      static_cast<uint32_t>(tail.data.size())};
  const std::size_t header_bytes = FrameHeaderBytes(h);
  // Written in place: the header, the message serialized straight into the queue, the
  // suffix; the tail stays where it is and joins the write as a buffer of its own.
  char* p = out_.Extend(header_bytes + message_bytes + suffix.size());
  EncodeFrameHeader(h, p);
  p += header_bytes;
  if (message) message->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p));
  if (!suffix.empty()) std::memcpy(p + message_bytes, suffix.data(), suffix.size());
  out_.AppendTail(std::move(tail));
}

void Connection::KickWriteLocked(bool flush_now, Released* released) {
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
  ssize_t n = 0;
  if (!out_.has_tails()) {
    std::string_view bytes = out_.bytes();
    n = stream_->TryWrite(bytes.data(), bytes.size());
  } else {
    std::vector<boost::asio::const_buffer> buffers;
    out_.Buffers(&buffers);
    n = stream_->TryWriteV(buffers);
  }
  if (n > 0) out_.Consume(static_cast<std::size_t>(n), released);
  if (out_.empty()) return;
  writing_ = true;
  boost::asio::post(io_, [self = shared_from_this()] { self->WriteLoop(); });
}

void Connection::DropReleased(Released released) {
  if (released.empty()) return;
  if (io_.get_executor().running_in_this_thread()) return;  // dropped here, on return
  boost::asio::post(io_, [released = std::move(released)]() mutable { released.clear(); });
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
    writing_q_.Swap(out_);  // out_ takes the cleared queue, and its memory
  }
  writing_q_.Buffers(&write_bufs_);
  auto on_written = [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
    // The stream is done with the bytes: drop the tails' keep-alives (outside mu_).
    Released released;
    self->writing_q_.Clear(&released);
    released.clear();
    if (ec) {
      self->Close(absl::UnavailableError("write failed: " + ec.message()));
      return;
    }
    self->WriteLoop();
  };
  if (write_bufs_.size() == 1) {
    stream_->AsyncWrite(static_cast<const char*>(write_bufs_[0].data()), write_bufs_[0].size(),
                        std::move(on_written));
  } else {
    stream_->AsyncWriteV(write_bufs_, std::move(on_written));
  }
}

void Connection::Call(uint32_t method, const google::protobuf::MessageLite& request,
                      ReplyCallback callback, std::optional<std::chrono::milliseconds> timeout,
                      std::string_view suffix, RawTail tail) {
  PendingCall call;
  call.callback = std::move(callback);
  StartCall(method, request, std::move(call), timeout, suffix, std::move(tail));
}

void Connection::CallInto(uint32_t method, const google::protobuf::MessageLite& request,
                          std::span<char> tail_buffer, TailedReplyCallback callback,
                          std::optional<std::chrono::milliseconds> timeout,
                          std::string_view suffix) {
  PendingCall call;
  call.tailed = std::move(callback);
  call.tail_buffer = tail_buffer;
  StartCall(method, request, std::move(call), timeout, suffix, {});
}

void Connection::StartCall(uint32_t method, const google::protobuf::MessageLite& request,
                           PendingCall call, std::optional<std::chrono::milliseconds> timeout,
                           std::string_view suffix, RawTail tail) {
  absl::StatusOr<uint32_t> body = BodyBytes(&request, suffix.size(), tail.data.size());
  const std::size_t message_bytes = body.ok() ? *body - suffix.size() - tail.data.size() : 0;
  Released released;
  {
    raio::MutexLock lock(&mu_);
    absl::Status refused = body.status();
    if (closed_) refused = absl::UnavailableError("connection to " + peer_name_ + " is closed");
    if (!refused.ok()) {
      if (tail.keep_alive) released.push_back(std::move(tail.keep_alive));
      boost::asio::post(io_,
                        [call = std::move(call), refused]() mutable { Complete(call, refused); });
    } else {
      const uint64_t id = next_request_id_++;
      PendingCall& pending = pending_[id];
      pending = std::move(call);
      if (timeout) {
        pending.timer = std::make_unique<raio::Timer>(io_);
        pending.timer->expires_after(*timeout);
        pending.timer->async_wait(
            [self = shared_from_this(), id](const boost::system::error_code& ec) {
              if (!ec) self->OnCallTimeout(id);  // else cancelled: the reply came
            });
      }
      AppendFrameLocked(FrameKind::kRequest, method, id, &request, message_bytes, suffix,
                        std::move(tail));
      KickWriteLocked(/*flush_now=*/false, &released);
    }
  }
  DropReleased(std::move(released));
}

void Connection::OnCallTimeout(uint64_t id) {
  PendingCall call;
  bool stalled = false;
  {
    raio::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    if (it->second.receiving_tail) {
      // Part of its reply is in the caller's buffer and the rest of the stream is behind
      // the rest of it: only closing hands the buffer back (FinishClose fails the call).
      it->second.timed_out = true;
      stalled = true;
    } else {
      call = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (stalled) {
    Close(absl::DeadlineExceededError("no reply from " + peer_name_ +
                                      " in time: its reply stalled mid-tail"));
    return;
  }
  Complete(call, absl::DeadlineExceededError("no reply from " + peer_name_ + " in time"));
}

void Connection::SendOneWay(uint32_t method, const google::protobuf::MessageLite& message,
                            bool flush_now) {
  absl::StatusOr<uint32_t> body = BodyBytes(&message, 0, 0);
  if (!body.ok()) {
    RAIO_LOG_ERROR("not sending a one-way frame to {}: {}", peer_name_, body.status().message());
    return;
  }
  Released released;
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
    AppendFrameLocked(FrameKind::kOneWay, method, 0, &message, *body, {}, {});
    KickWriteLocked(flush_now, &released);
  }
  DropReleased(std::move(released));
}

void Connection::Reply(const FrameHeader& request, const google::protobuf::MessageLite& reply,
                       bool flush_now) {
  ReplyWithTail(request, reply, {}, {}, flush_now);
}

void Connection::ReplyWithTail(const FrameHeader& request,
                               const google::protobuf::MessageLite& reply, std::string_view suffix,
                               RawTail tail, bool flush_now) {
  absl::StatusOr<uint32_t> body = BodyBytes(&reply, suffix.size(), tail.data.size());
  Released released;
  if (!body.ok()) {
    if (tail.keep_alive) released.push_back(std::move(tail.keep_alive));
    DropReleased(std::move(released));
    return ReplyError(request, body.status());
  }
  {
    raio::MutexLock lock(&mu_);
    if (closed_) {
      if (tail.keep_alive) released.push_back(std::move(tail.keep_alive));
    } else {
      AppendFrameLocked(FrameKind::kReply, request.method, request.request_id, &reply,
                        *body - suffix.size() - tail.data.size(), suffix, std::move(tail));
      KickWriteLocked(flush_now, &released);
    }
  }
  DropReleased(std::move(released));
}

void Connection::ReplyError(const FrameHeader& request, const absl::Status& status) {
  proto::RpcStatus s;
  s.set_code(static_cast<int32_t>(status.code()));
  s.set_message(std::string(status.message()));
  const std::size_t bytes = s.ByteSizeLong();
  Released released;
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
    AppendFrameLocked(FrameKind::kError, request.method, request.request_id, &s, bytes, {}, {});
    KickWriteLocked(/*flush_now=*/false, &released);
  }
  DropReleased(std::move(released));
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
    // On the loop thread, close the stream now: its pending read is cancelled before it
    // can write into a CallInto buffer whose owner frees it once Close returns.
    if (io_.get_executor().running_in_this_thread()) stream_->Close();
  }
  boost::asio::post(io_, [self = shared_from_this()] { self->FinishClose(); });
}

void Connection::FinishClose() {
  if (close_handled_) return;
  close_handled_ = true;
  std::unordered_map<uint64_t, PendingCall> pending;
  absl::Status reason;
  Released released;
  {
    raio::MutexLock lock(&mu_);
    reason = close_reason_;
    pending.swap(pending_);
    stream_->Close();
    out_.Clear(&released);
  }
  released.clear();
  for (auto& [id, call] : pending) {
    if (call.timer) call.timer->cancel();
    Complete(call, call.timed_out
                       ? absl::DeadlineExceededError("no reply from " + peer_name_ +
                                                     " in time: its reply stalled mid-tail")
                       : absl::UnavailableError("connection to " + peer_name_ +
                                                " closed: " + std::string(reason.message())));
  }
  if (on_close_) on_close_(shared_from_this(), reason);
  on_request_ = nullptr;
  on_close_ = nullptr;
}

// --- Reading ---

void Connection::ReadMore() {
  {
    raio::MutexLock lock(&mu_);
    if (closed_) return;
  }
  auto on_read = [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
    self->OnRead(ec, n);
  };
  switch (phase_) {
    case ReadPhase::kFrames: {
      const std::size_t capacity = read_buf_.capacity();
      if (read_end_ == capacity) {
        // Make room: move the partial frame (smaller than the buffer: larger ones go to
        // frame_buf_) or header to the front.
        std::memmove(read_buf_.data(), read_buf_.data() + read_begin_, read_end_ - read_begin_);
        read_end_ -= read_begin_;
        read_begin_ = 0;
      }
      RAIO_CHECK(read_end_ < capacity);
      stream_->AsyncReadSome(read_buf_.data() + read_end_, capacity - read_end_,
                             std::move(on_read));
      return;
    }
    case ReadPhase::kBody: {
      // Grow as the bytes come, never to the length the header claims up front: else 20
      // bytes from a peer could take up to kMaxFrameBytes (512 MiB) per connection.
      const std::size_t have = frame_buf_.size();
      if (have == frame_buf_.capacity()) {
        frame_buf_.Reserve(std::min(frame_need_, std::max(2 * have, kReadBufferBytes)));
      }
      const std::size_t room = std::min(frame_need_, frame_buf_.capacity()) - have;
      stream_->AsyncReadSome(frame_buf_.data() + have, room, std::move(on_read));
      return;
    }
    case ReadPhase::kTail:
      stream_->AsyncReadSome(tail_dest_ + tail_got_, tail_size_ - tail_got_, std::move(on_read));
      return;
    case ReadPhase::kSkip:
      stream_->AsyncReadSome(
          read_buf_.data(),
          static_cast<std::size_t>(std::min<uint64_t>(skip_left_, read_buf_.capacity())),
          std::move(on_read));
      return;
  }
}

void Connection::OnRead(const boost::system::error_code& ec, std::size_t n) {
  if (ec) {
    // A local Close() that woke this read keeps its own reason (Close is a no-op then).
    Close(ec == boost::asio::error::eof ? absl::UnavailableError("peer closed the connection")
                                        : absl::UnavailableError("read failed: " + ec.message()));
    FinishClose();
    return;
  }
  switch (phase_) {
    case ReadPhase::kFrames:
      read_end_ += n;
      break;
    case ReadPhase::kBody: {
      frame_buf_.Extend(n);
      if (frame_buf_.size() < frame_need_) return ReadMore();
      phase_ = ReadPhase::kFrames;
      const std::string_view gathered(frame_buf_.data(), frame_need_);
      if (frame_to_tail_) {
        if (!StartTail(frame_header_, gathered)) return;
      } else {
        Dispatch(frame_header_, gathered);
        if (close_handled_) return;
        if (frame_buf_.capacity() > kKeepFrameBufferBytes) frame_buf_.Release();
        frame_buf_.Clear();
      }
      break;
    }
    case ReadPhase::kTail:
      tail_got_ += n;
      if (tail_got_ < tail_size_) return ReadMore();
      if (!FinishTail()) return;
      break;
    case ReadPhase::kSkip:
      skip_left_ -= n;
      if (skip_left_ > 0) return ReadMore();
      phase_ = ReadPhase::kFrames;
      break;
  }
  if (!ProcessBuffered()) return;
  ReadMore();
}

bool Connection::ProcessBuffered() {
  while (phase_ == ReadPhase::kFrames) {
    const std::size_t avail = read_end_ - read_begin_;
    const char* p = read_buf_.data() + read_begin_;
    FrameHeader h;
    absl::StatusOr<std::size_t> header_bytes =
        ParseFrameHeader(std::string_view(p, avail), config::kMaxFrameBytes, &h);
    if (!header_bytes.ok()) {
      RAIO_LOG_WARN("closing connection to {}: {}", peer_name_, header_bytes.status().message());
      Close(header_bytes.status());
      return false;
    }
    if (*header_bytes == 0) break;  // a partial header: wait for the rest
    const std::size_t total = *header_bytes + h.body_bytes;

    // A reply's tail goes straight into its CallInto buffer; all else is read whole.
    bool to_tail = false;
    if (h.kind == FrameKind::kReply && h.tail_bytes > 0) {
      bool wanted = false;
      std::size_t room = 0;
      {
        raio::MutexLock lock(&mu_);
        auto it = pending_.find(h.request_id);
        if (it != pending_.end()) {
          wanted = true;
          to_tail = static_cast<bool>(it->second.tailed);
          room = it->second.tail_buffer.size();
        }
      }
      if (to_tail && h.tail_bytes > room) {
        FailCall(h.request_id,
                 PeerError(absl::OutOfRangeError(absl::StrCat(
                     "the reply from ", peer_name_, " ends in ", h.tail_bytes,
                     " bytes, more than the buffer of ", room, " bytes given for them"))));
        if (close_handled_) return false;
        wanted = false;
      }
      if (!wanted) {  // timed out earlier, or refused
        Skip(total);
        continue;
      }
    }
    const std::size_t contiguous = to_tail ? total - h.tail_bytes : total;
    if (avail < contiguous) {
      if (contiguous <= read_buf_.capacity()) break;  // fits: wait for the rest
      // Larger than the read buffer: gathered apart (read_buf_ is neither shifted nor grown
      // for it), unless it is a reply no one waits for any more.
      if (!to_tail && (h.kind == FrameKind::kReply || h.kind == FrameKind::kError)) {
        bool wanted = false;
        {
          raio::MutexLock lock(&mu_);
          wanted = pending_.count(h.request_id) > 0;
        }
        if (!wanted) {
          Skip(total);
          continue;
        }
      }
      StartBody(h, *header_bytes, contiguous, to_tail);
      return true;
    }
    if (to_tail) {
      read_begin_ += contiguous;
      if (!StartTail(h, std::string_view(p + *header_bytes, contiguous - *header_bytes))) {
        return false;
      }
      continue;
    }
    read_begin_ += total;
    Dispatch(h, std::string_view(p + *header_bytes, h.body_bytes));
    if (close_handled_) return false;
  }
  if (phase_ == ReadPhase::kFrames && read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  return true;
}

void Connection::StartBody(const FrameHeader& h, std::size_t header_bytes, std::size_t contiguous,
                           bool to_tail) {
  frame_header_ = h;
  frame_to_tail_ = to_tail;
  frame_need_ = contiguous - header_bytes;
  const std::size_t have = read_end_ - read_begin_ - header_bytes;
  frame_buf_.Clear();
  frame_buf_.Reserve(std::min(frame_need_, std::max(2 * have, kReadBufferBytes)));
  std::memcpy(frame_buf_.Extend(have), read_buf_.data() + read_begin_ + header_bytes, have);
  read_begin_ = read_end_ = 0;
  phase_ = ReadPhase::kBody;
}

bool Connection::StartTail(const FrameHeader& h, std::string_view message) {
  char* dest = nullptr;
  {
    raio::MutexLock lock(&mu_);
    auto it = pending_.find(h.request_id);
    if (it != pending_.end() && it->second.tailed &&
        h.tail_bytes <= it->second.tail_buffer.size()) {
      it->second.receiving_tail = true;
      dest = it->second.tail_buffer.data();
    }
  }
  if (dest == nullptr) {  // the call timed out while its message came
    frame_buf_.Clear();
    Skip(h.tail_bytes);
    return true;
  }
  // What came with the message (at most a read buffer) is copied; the rest is read there.
  const std::size_t here = std::min<std::size_t>(h.tail_bytes, read_end_ - read_begin_);
  std::memcpy(dest, read_buf_.data() + read_begin_, here);
  read_begin_ += here;
  tail_call_ = h.request_id;
  tail_dest_ = dest;
  tail_size_ = h.tail_bytes;
  tail_got_ = here;
  tail_message_ = message;
  if (tail_got_ < tail_size_) {
    phase_ = ReadPhase::kTail;  // read_buf_ is empty now, and keeps `message` meanwhile
    return true;
  }
  return FinishTail();
}

bool Connection::FinishTail() {
  PendingCall call;
  bool found = false;
  {
    raio::MutexLock lock(&mu_);
    auto it = pending_.find(tail_call_);
    if (it != pending_.end()) {
      call = std::move(it->second);
      pending_.erase(it);
      found = true;
    }
  }
  phase_ = ReadPhase::kFrames;
  const TailedReply reply{tail_message_, tail_size_};
  tail_dest_ = nullptr;
  tail_message_ = {};
  if (found) {
    if (call.timer) call.timer->cancel();
    call.tailed(reply);
  }
  if (frame_buf_.capacity() > kKeepFrameBufferBytes) frame_buf_.Release();
  frame_buf_.Clear();
  return !close_handled_;
}

void Connection::Skip(uint64_t n) {
  const std::size_t here = static_cast<std::size_t>(std::min<uint64_t>(n, read_end_ - read_begin_));
  read_begin_ += here;
  n -= here;
  if (n == 0) return;
  read_begin_ = read_end_ = 0;  // everything read so far is used up
  skip_left_ = n;
  phase_ = ReadPhase::kSkip;
}

void Connection::Complete(PendingCall& call, const absl::StatusOr<std::string_view>& result) {
  if (call.tailed) {
    if (result.ok()) {
      call.tailed(TailedReply{*result, 0});
    } else {
      call.tailed(result.status());
    }
    return;
  }
  call.callback(result);
}

void Connection::FailCall(uint64_t id, const absl::Status& status) {
  PendingCall call;
  {
    raio::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    call = std::move(it->second);
    pending_.erase(it);
  }
  if (call.timer) call.timer->cancel();
  Complete(call, status);
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
        Complete(call, body);
      } else {
        proto::RpcStatus s;
        // An error frame carrying OK is malformed too: StatusOr refuses an OK status, and
        // Debian's abseil aborts the process on one.
        if (!s.ParseFromArray(body.data(), static_cast<int>(body.size())) ||
            s.code() == static_cast<int32_t>(absl::StatusCode::kOk)) {
          Complete(call,
                   PeerError(absl::InternalError("malformed error reply from " + peer_name_)));
        } else {
          Complete(call,
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
