// Shared by the Connection tests (connection_test.cc, connection_raw_test.cc): the methods
// the test servers answer and small request and payload builders.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/testkit/time_scale.h"

namespace raio::rpc::test {

// Generous deadline, only reached when something is broken; scaled (testkit/time_scale.h).
inline const std::chrono::seconds kWait = raio::testkit::Scaled(std::chrono::seconds(20));
inline constexpr uint32_t kEcho = proto::RETURN_WORKER_LEASE;
inline constexpr uint32_t kSilent = proto::CANCEL_WORKER_LEASE;
inline constexpr uint32_t kFail = proto::GET_NODE_STATS;
// Answered with a ReadObjectChunkReply {object_size_bytes: n} whose `data` (n bytes of
// Pattern(n)) goes as a raw tail; n is the request's lease id (a LeaseIdRequest, or a
// ReadObjectChunkRequest: field 1 is a length-delimited string in both).
inline constexpr uint32_t kTail = proto::READ_OBJECT_CHUNK;
inline constexpr int kDataField = proto::ReadObjectChunkReply::kDataFieldNumber;

enum class Transport { kUnix, kTcp };

inline std::string LeaseBody(const std::string& id) {
  proto::LeaseIdRequest r;
  r.set_lease_id(id);
  return r.SerializeAsString();
}

inline proto::LeaseIdRequest Lease(const std::string& id) {
  proto::LeaseIdRequest r;
  r.set_lease_id(id);
  return r;
}

// `n` bytes that differ from their neighbours, so that a byte out of place shows.
inline std::string Pattern(std::size_t n, int seed = 7) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed) % 251);
  return out;
}

}  // namespace raio::rpc::test
