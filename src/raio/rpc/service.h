// Typed RPC over raio's framing, by the method table (rpc/methods.h).
//
// Server side: a Service maps method numbers to typed handlers. Dispatch parses the
// body as the method's request type and calls the handler with a Responder for the
// method's reply type; a malformed body is answered with InvalidArgument naming the
// method (the handler never sees it), a method without a handler is left to the next
// service (Dispatch returns false). Every call passes the service's one Authorizer, the
// place for authentication and per-method policy (the head refuses a SHUTDOWN_CLUSTER
// whose token is wrong there), and is counted per method (calls, refusals).
//
// Client side: Call<M>, CallSync<M> and Notify<M> send a method's request type and parse
// its reply type, with the table's deadline unless the caller gives another.
//
// Bulk bytes: a handler may answer with Responder::OkWithTail, which sends one bytes field
// of the reply as a raw tail, from the handler's memory; CallInto<M> reads that field
// straight into a buffer of the caller's. To any other client the reply is an ordinary
// one (the field's bytes come last in the body).
//
// Threading: a Service is configured (Handle, SetAuthorizer) before its connections
// start; Dispatch runs on the connections' loop thread. Counters are read there too.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/methods.h"

namespace raio::rpc {

// Method numbers are below this (rpc.proto).
inline constexpr uint32_t kMaxMethods = 96;

// Answers one call of method M; Reply/Error are no-ops for a one-way frame.
template <proto::Method M>
class Responder {
 public:
  using Reply = typename MethodTraits<M>::Reply;
  Responder(std::shared_ptr<Connection> conn, const FrameHeader& header)
      : conn_(std::move(conn)), header_(header) {}
  void Ok(const Reply& reply, bool flush_now = false) const {
    if (header_.kind == FrameKind::kRequest) conn_->Reply(header_, reply, flush_now);
  }
  // Answers with `reply` and then `tail` as the value of its bytes field `field_number`,
  // which `reply` leaves empty: a peer that reads the body whole parses one Reply with
  // that field set; CallInto<M> gets the field's bytes in its own buffer. The bytes are
  // written from `tail.data` with no copy; `tail.keep_alive` keeps them valid until they
  // are written or the connection closes (see RawTail), and is dropped at once for a
  // one-way frame.
  void OkWithTail(const Reply& reply, int field_number, RawTail tail,
                  bool flush_now = false) const {
    if (header_.kind != FrameKind::kRequest) return;
    FieldSuffix suffix;
    suffix.AddBytesFieldHeader(field_number, tail.data.size());
    conn_->ReplyWithTail(header_, reply, suffix.view(), std::move(tail), flush_now);
  }
  void Error(const absl::Status& status) const {
    if (header_.kind == FrameKind::kRequest) conn_->ReplyError(header_, status);
  }
  const std::shared_ptr<Connection>& conn() const { return conn_; }
  const FrameHeader& header() const { return header_; }

 private:
  std::shared_ptr<Connection> conn_;
  FrameHeader header_;
};

class Service {
 public:
  // Decides whether `conn` may call `method` with `request` (OK) or not (the error is the
  // reply). Default: everything is allowed.
  using Authorizer = std::function<absl::Status(const MethodInfo& method, const Connection& conn,
                                                const google::protobuf::MessageLite& request)>;
  struct MethodStats {
    uint64_t calls = 0;
    uint64_t malformed = 0;
    uint64_t refused = 0;
  };

  explicit Service(std::string name) : name_(std::move(name)) {}

  // Registers `handler(Responder<M>, Request&)` (the request may be moved from).
  template <proto::Method M, typename F>
  void Handle(F handler) {
    HandleInto<M>(nullptr, std::move(handler));
  }
  // The same, parsing every request into `*scratch` (reused, so that a hot method's
  // repeated fields keep their memory; nullptr: a fresh message per call). `scratch`
  // must outlive the service and be touched only on the connections' loop thread.
  template <proto::Method M, typename F>
  void HandleInto(typename MethodTraits<M>::Request* scratch, F handler) {
    static_assert(static_cast<uint32_t>(M) < kMaxMethods);
    table_[M] = [this, scratch, handler = std::move(handler)](
                    const std::shared_ptr<Connection>& conn, const FrameHeader& h,
                    std::string_view body) {
      constexpr const MethodInfo& info = MethodTraits<M>::kInfo;
      typename MethodTraits<M>::Request fresh;
      typename MethodTraits<M>::Request& request = scratch != nullptr ? *scratch : fresh;
      if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        ++stats_[M].malformed;
        if (h.kind == FrameKind::kRequest) {
          conn->ReplyError(
              h, absl::InvalidArgumentError(absl::StrCat("malformed ", std::string(info.name),
                                                         " request from ", conn->peer_name())));
        }
        return;
      }
      if (authorizer_) {
        if (absl::Status s = authorizer_(info, *conn, request); !s.ok()) {
          ++stats_[M].refused;
          if (h.kind == FrameKind::kRequest) conn->ReplyError(h, s);
          return;
        }
      }
      ++stats_[M].calls;
      handler(Responder<M>(conn, h), request);
    };
  }
  void SetAuthorizer(Authorizer authorizer) { authorizer_ = std::move(authorizer); }

  // Runs the handler of `h.method`; false when this service has none (the frame is then
  // untouched: another service may take it). Replies to a frame of the wrong kind.
  bool Dispatch(const std::shared_ptr<Connection>& conn, const FrameHeader& h,
                std::string_view body) {
    if (h.method >= kMaxMethods || !table_[h.method]) return false;
    if (h.kind != FrameKind::kRequest && h.kind != FrameKind::kOneWay) return true;
    table_[h.method](conn, h, body);
    return true;
  }
  // Answers a frame that no service took: Unimplemented, naming the method if known.
  void RejectUnknown(const std::shared_ptr<Connection>& conn, const FrameHeader& h) const;

  const MethodStats& stats(proto::Method m) const { return stats_[m]; }
  const std::string& name() const { return name_; }

 private:
  using Entry =
      std::function<void(const std::shared_ptr<Connection>&, const FrameHeader&, std::string_view)>;
  std::string name_;
  std::array<Entry, kMaxMethods> table_;
  std::array<MethodStats, kMaxMethods> stats_{};
  Authorizer authorizer_;
};

// Wraps `on_reply(absl::StatusOr<Reply>)` as the Connection::ReplyCallback of a call of
// method M: it parses the reply body (a malformed one is an Internal error naming the
// method, marked as the peer's: IsPeerError).
template <proto::Method M, typename F>
Connection::ReplyCallback TypedReply(F on_reply) {
  static_assert(MethodTraits<M>::kInfo.kind == CallKind::kUnary, "use Notify for one-way");
  return [on_reply = std::move(on_reply)](const absl::StatusOr<std::string_view>& body) mutable {
    using Reply = typename MethodTraits<M>::Reply;
    if (!body.ok()) return on_reply(absl::StatusOr<Reply>(body.status()));
    Reply reply;
    if (!reply.ParseFromArray(body->data(), static_cast<int>(body->size()))) {
      return on_reply(absl::StatusOr<Reply>(PeerError(absl::InternalError(
          absl::StrCat("malformed ", std::string(MethodTraits<M>::kInfo.name), " reply")))));
    }
    on_reply(absl::StatusOr<Reply>(std::move(reply)));
  };
}

// Sends a request of method M; `on_reply(absl::StatusOr<Reply>)` runs on the connection's
// loop thread (see TypedReply).
template <proto::Method M, typename F>
void Call(
    Connection& conn, const typename MethodTraits<M>::Request& request, F on_reply,
    std::optional<std::chrono::milliseconds> deadline = DefaultDeadline(MethodTraits<M>::kInfo)) {
  conn.Call(M, request, TypedReply<M>(std::move(on_reply)), deadline);
}

// A reply of method M read by CallInto<M>: every field of it but the one that went to the
// caller's buffer, and how many bytes of that field were written at the start of the
// buffer. `bytes` is 0 when the reply had no tail (a peer that answered with Ok): then the
// field, if set, is in `reply`.
template <typename Reply>
struct IntoReply {
  Reply reply;
  std::size_t bytes = 0;
};

namespace internal {
// Parses `message`, a reply body up to its tail, into `*reply`. With `tail_bytes` > 0 it
// must end in the header of bytes field `field_number` holding `tail_bytes` bytes (as
// OkWithTail writes it), which is left out; with 0 it is the whole body. False when it
// does not parse.
bool ParseBeforeTail(std::string_view message, int field_number, std::size_t tail_bytes,
                     google::protobuf::MessageLite* reply);
}  // namespace internal

// Sends a request of method M whose reply's bytes field `field_number` is read straight
// into `buffer` (the socket's bytes land there; see Connection::CallInto).
// `on_reply(absl::StatusOr<IntoReply<Reply>>)` runs on the loop thread; besides Call's
// errors: OutOfRange when the field is longer than `buffer`, Internal when the reply does
// not parse (both marked as the peer's). `buffer` must stay valid and unused until then.
template <proto::Method M, typename F>
void CallInto(
    Connection& conn, const typename MethodTraits<M>::Request& request, int field_number,
    std::span<char> buffer, F on_reply,
    std::optional<std::chrono::milliseconds> deadline = DefaultDeadline(MethodTraits<M>::kInfo)) {
  static_assert(MethodTraits<M>::kInfo.kind == CallKind::kUnary, "a one-way frame has no reply");
  using Reply = typename MethodTraits<M>::Reply;
  using Result = absl::StatusOr<IntoReply<Reply>>;
  conn.CallInto(
      M, request, buffer,
      [on_reply = std::move(on_reply),
       field_number](const absl::StatusOr<Connection::TailedReply>& r) mutable {
        if (!r.ok()) return on_reply(Result(r.status()));
        IntoReply<Reply> out;
        if (!internal::ParseBeforeTail(r->message, field_number, r->tail_bytes, &out.reply)) {
          return on_reply(Result(PeerError(absl::InternalError(
              absl::StrCat("malformed ", std::string(MethodTraits<M>::kInfo.name), " reply")))));
        }
        out.bytes = r->tail_bytes;
        on_reply(Result(std::move(out)));
      },
      deadline);
}

// Sends a request of method M and blocks for the reply (never on the loop thread).
template <proto::Method M>
absl::StatusOr<typename MethodTraits<M>::Reply> CallSync(
    Connection& conn, const typename MethodTraits<M>::Request& request,
    std::optional<std::chrono::milliseconds> deadline = DefaultDeadline(MethodTraits<M>::kInfo)) {
  auto body = CallSync(conn, M, request, deadline);
  if (!body.ok()) return body.status();
  typename MethodTraits<M>::Reply reply;
  if (!reply.ParseFromString(*body)) {
    return PeerError(absl::InternalError(
        absl::StrCat("malformed ", std::string(MethodTraits<M>::kInfo.name), " reply")));
  }
  return reply;
}

// Sends a one-way frame of method M (`flush_now`: see Connection::SendOneWay).
template <proto::Method M>
void Notify(Connection& conn, const typename MethodTraits<M>::Request& request,
            bool flush_now = false) {
  conn.SendOneWay(M, request, flush_now);
}

}  // namespace raio::rpc
