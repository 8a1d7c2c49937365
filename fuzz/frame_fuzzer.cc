// frame_fuzzer: bytes from a peer, fed to a real rpc::Connection over a Unix socketpair.
// Exercises DecodeFrameHeader and the connection's stream reassembly (OnRead: partial
// headers, bodies split across reads, buffer compaction and growth), the dispatch of
// requests, one-way frames, replies and error replies to calls in flight.
//
// Input: byte 0 picks how the rest is cut into writes (1..64 bytes each, or all at
// once); the rest is the byte stream. Each write is read by the connection before the
// next one, then the peer half-closes.
//
// Beside "no crash, no sanitizer report" the fuzzer checks the connection against a
// model that walks the same bytes frame by frame: the same requests reach the handler
// with the same bodies, whatever the cut; a bad header closes the connection with that
// header's error and a logged warning; otherwise end of stream closes it; every call in
// flight gets exactly one answer.
#include <google/protobuf/stubs/logging.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_log_sink.h"
#include "raio/common.pb.h"
#include "raio/common/config.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/frame.h"

namespace raio::fuzz {
namespace {

// Calls the connection has in flight when the bytes arrive: request ids 1..kCalls.
constexpr uint64_t kCalls = 4;

#define FUZZ_EXPECT(cond)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "frame_fuzzer: expectation failed: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

struct Delivered {
  rpc::FrameKind kind;
  uint32_t method;
  uint64_t request_id;
  std::string body;
  bool operator==(const Delivered&) const = default;
};

struct Expected {
  std::vector<Delivered> requests;  // requests and one-way frames, in order
  std::string replies[kCalls + 1];  // by request id: body of a kReply
  bool reply_is_error[kCalls + 1] = {};
  bool answered[kCalls + 1] = {};
  absl::Status close_reason;  // the bad header's error, or OK for end of stream
};

// Walks `stream` as the wire format says (src/raio/rpc/frame.h).
Expected Model(std::string_view stream) {
  Expected e;
  std::size_t at = 0;
  while (at < stream.size()) {
    rpc::FrameHeader h;
    // Version 1 (20 bytes) or version 2 (24, with a tail); no CallInto here, so a tail is
    // read with the rest of the body.
    absl::StatusOr<std::size_t> header_bytes =
        rpc::ParseFrameHeader(stream.substr(at), config::kMaxFrameBytes, &h);
    if (!header_bytes.ok()) {
      e.close_reason = header_bytes.status();
      return e;
    }
    if (*header_bytes == 0) break;                                 // truncated header
    if (stream.size() - at - *header_bytes < h.body_bytes) break;  // truncated body
    std::string body(stream.substr(at + *header_bytes, h.body_bytes));
    at += *header_bytes + h.body_bytes;
    switch (h.kind) {
      case rpc::FrameKind::kRequest:
      case rpc::FrameKind::kOneWay:
        e.requests.push_back({h.kind, h.method, h.request_id, std::move(body)});
        break;
      case rpc::FrameKind::kReply:
      case rpc::FrameKind::kError:
        if (h.request_id >= 1 && h.request_id <= kCalls && !e.answered[h.request_id]) {
          e.answered[h.request_id] = true;
          e.reply_is_error[h.request_id] = h.kind == rpc::FrameKind::kError;
          e.replies[h.request_id] = std::move(body);
        }
        break;
    }
  }
  return e;
}

struct Fixture {
  boost::asio::io_context io;
  std::shared_ptr<CapturingSink> log = CapturingSink::InstallAsDefault();
};

Fixture& GetFixture() {
  static Fixture* fixture = new Fixture();  // never destroyed: outlives every input
  return *fixture;
}

}  // namespace
}  // namespace raio::fuzz

// Parse failures are expected here by the million: keep protobuf from logging each one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace raio;
  using namespace raio::fuzz;
  if (size < 1) return 0;
  const std::size_t cut = data[0] % 65;  // 0: one write
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const Expected expected = Model(stream);

  Fixture& f = GetFixture();
  f.log->Take();
  int fds[2];
  FUZZ_EXPECT(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  const int peer = fds[1];
  rpc::Socket socket(f.io, boost::asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
  auto conn = rpc::Connection::Create(std::move(socket), "fuzz peer");

  std::vector<Delivered> requests;
  int closes = 0;
  absl::Status close_reason;
  conn->Start(
      [&](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
          std::string_view body) {
        requests.push_back({h.kind, h.method, h.request_id, std::string(body)});
        if (h.kind == rpc::FrameKind::kRequest) c->Reply(h, proto::Empty());
      },
      [&](const std::shared_ptr<rpc::Connection>&, const absl::Status& reason) {
        ++closes;
        close_reason = reason;
      });
  int answers[kCalls + 1] = {};
  std::optional<absl::StatusOr<std::string>> results[kCalls + 1];
  for (uint64_t id = 1; id <= kCalls; ++id) {
    conn->Call(proto::GET_NODE_STATS, proto::Empty(),
               [&, id](const absl::StatusOr<std::string_view>& r) {
                 ++answers[id];
                 if (r.ok()) {
                   results[id] = std::string(*r);
                 } else {
                   results[id] = r.status();
                 }
               });
  }
  auto drain = [&] {
    while (f.io.poll() > 0) {
    }
    f.io.restart();
  };
  drain();

  const std::size_t step = cut == 0 ? stream.size() : cut;
  for (std::size_t at = 0; at < stream.size() && !conn->closed(); at += step) {
    std::size_t n = std::min(step, stream.size() - at);
    if (::send(peer, stream.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) break;
    drain();
  }
  ::shutdown(peer, SHUT_WR);
  f.io.run();
  f.io.restart();
  ::close(peer);

  FUZZ_EXPECT(closes == 1);
  FUZZ_EXPECT(requests == expected.requests);
  std::vector<std::string> warnings = f.log->Take();
  if (!expected.close_reason.ok()) {
    FUZZ_EXPECT(close_reason == expected.close_reason);
    bool logged = false;
    for (const auto& w : warnings) {
      logged = logged || w.find(std::string(expected.close_reason.message())) != std::string::npos;
    }
    FUZZ_EXPECT(logged);
  } else {
    FUZZ_EXPECT(close_reason.code() == absl::StatusCode::kUnavailable);
  }
  for (uint64_t id = 1; id <= kCalls; ++id) {
    FUZZ_EXPECT(answers[id] == 1);
    if (!expected.answered[id]) {
      FUZZ_EXPECT(results[id]->status().code() == absl::StatusCode::kUnavailable);
    } else if (expected.reply_is_error[id]) {
      FUZZ_EXPECT(!results[id]->ok());
    } else {
      FUZZ_EXPECT(results[id]->ok() && **results[id] == expected.replies[id]);
    }
  }
  return 0;
}
