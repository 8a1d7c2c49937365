// Frame layout of raio's transport. Every message on a connection is one frame:
//
//   offset size field
//   0      2    magic 0x5241 ("RA"), little-endian
//   2      1    version: 1 (kFrameVersion), or 2 (kTailFrameVersion) for a frame whose
//               body ends in a raw tail
//   3      1    kind (FrameKind)
//   4      4    method (proto::Method)
//   8      8    request id (pairs a reply with its request; 0 for one-way)
//   16     4    body length in bytes, the tail included (<= config::kMaxFrameBytes)
//   20     4    version 2 only: tail length in bytes (<= body length)
//   20|24  n    body: a serialized protobuf message (RpcStatus for kError); in a version-2
//               frame its last `tail length` bytes are the raw tail
//
// A raw tail is bytes that the sender writes from its own memory (no copy into the
// connection's buffer) and that the receiver may read straight into a buffer of its own
// (Connection::CallInto). What the tail means is the method's business: raio's typed layer
// (service.h) sends it as the value of a bytes field opened at the end of the message, so
// that a body read whole still parses as the method's message. A frame without a tail is
// a version-1 frame, byte for byte as before tails existed.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace raio::rpc {

inline constexpr uint16_t kFrameMagic = 0x5241;
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr uint8_t kTailFrameVersion = 2;
inline constexpr std::size_t kFrameHeaderBytes = 20;
inline constexpr std::size_t kTailFrameHeaderBytes = 24;

enum class FrameKind : uint8_t { kRequest = 0, kReply = 1, kError = 2, kOneWay = 3 };

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint32_t method = 0;
  uint64_t request_id = 0;
  uint32_t body_bytes = 0;  // the tail included
  uint32_t tail_bytes = 0;  // > 0: a version-2 frame
};

// The size of `header` on the wire: kFrameHeaderBytes, or kTailFrameHeaderBytes when it
// has a tail.
inline std::size_t FrameHeaderBytes(const FrameHeader& header) {
  return header.tail_bytes > 0 ? kTailFrameHeaderBytes : kFrameHeaderBytes;
}

// Writes the header at `out` (FrameHeaderBytes(header) bytes: version 1 without a tail,
// version 2 with one) and returns its size. `tail_bytes` must not exceed `body_bytes`.
std::size_t EncodeFrameHeader(const FrameHeader& header, char* out);

// Parses the header at the start of `in`, the bytes received so far. Returns the header's
// size (kFrameHeaderBytes or kTailFrameHeaderBytes), or 0 when `in` does not hold all of
// it yet (call again with more). InvalidArgument, as soon as the first 20 bytes are there,
// on a bad magic, version or kind, or a body longer than `max_body_bytes`; and, for a
// version-2 header, on a tail longer than the body.
absl::StatusOr<std::size_t> ParseFrameHeader(std::string_view in, uint32_t max_body_bytes,
                                             FrameHeader* header);

// Parses the kFrameHeaderBytes at `in` as a version-1 header. InvalidArgument on a bad
// magic, version or kind, or a body longer than `max_body_bytes`; a version-2 header is
// refused too (it is longer than the bytes this reads: use ParseFrameHeader).
absl::Status DecodeFrameHeader(const char* in, uint32_t max_body_bytes, FrameHeader* header);

}  // namespace raio::rpc
