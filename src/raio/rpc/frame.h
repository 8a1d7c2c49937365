// Frame layout of raio's transport. Every message on a connection is one frame:
//
//   offset size field
//   0      2    magic 0x5241 ("RA"), little-endian
//   2      1    version (kFrameVersion)
//   3      1    kind (FrameKind)
//   4      4    method (proto::Method)
//   8      8    request id (pairs a reply with its request; 0 for one-way)
//   16     4    body length in bytes (<= config::kMaxFrameBytes)
//   20     n    body: a serialized protobuf message (RpcStatus for kError)
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace raio::rpc {

inline constexpr uint16_t kFrameMagic = 0x5241;
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 20;

enum class FrameKind : uint8_t { kRequest = 0, kReply = 1, kError = 2, kOneWay = 3 };

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint32_t method = 0;
  uint64_t request_id = 0;
  uint32_t body_bytes = 0;
};

// Writes the 20-byte header at `out`.
void EncodeFrameHeader(const FrameHeader& header, char* out);
// Parses 20 bytes at `in`. InvalidArgument on a bad magic, version, kind, or a body
// longer than `max_body_bytes`.
absl::Status DecodeFrameHeader(const char* in, uint32_t max_body_bytes, FrameHeader* header);

}  // namespace raio::rpc
