// Conversions between value formats on the worker side: joining the elements of a
// std::vector argument (some of which may be raw arrays from the store) into one msgpack
// array. Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/serialization.h"

namespace raio::worker {

// Appends a msgpack array header for `n` elements.
void AppendMsgpackArrayHeader(std::string* out, uint32_t n);
// Appends `value` as one msgpack object: msgpack bytes as they are, an array as a msgpack
// array of its numbers, raw bytes as msgpack bin. InvalidArgument on an unknown dtype.
absl::Status AppendAsMsgpack(const internal::ValueView& value, std::string* out);
// Splits the bytes of a ValueFormat::kReturns value (internal::PackReturns) into its
// parts, viewing into `packed` (which must outlive them). InvalidArgument on a truncated
// part or an unknown format.
absl::StatusOr<std::vector<internal::ValueView>> UnpackReturns(std::string_view packed);

}  // namespace raio::worker
