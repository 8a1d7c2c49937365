// value_fuzzer: a task argument or object value from a peer, decoded as the C++ types
// a remote function or ObjectRef::Get would ask for (raio::internal::Decode: msgpack,
// raw arrays with a dtype, raw bytes) and joined into a std::vector argument the way a
// worker joins list elements (worker::AppendAsMsgpack), and split as packed return
// values (worker::UnpackReturns).
//
// Input: byte 0 is the ValueFormat and byte 1 the DType as they travel in TaskArg
// (any value, known or not), byte 2 picks the C++ type to decode as (fuzz::DecodeAs),
// the rest is the value's bytes. One type per input keeps the fuzzer fast: a failed
// decoding throws twice, and exceptions are slow under the sanitizers.
#include <cstdint>
#include <string>
#include <string_view>

#include "decode_values.h"
#include "raio/worker/value_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace raio;
  if (size < 3) return 0;
  internal::ValueView v;
  v.format = static_cast<internal::ValueFormat>(data[0]);
  v.dtype = static_cast<internal::DType>(data[1]);
  const std::size_t type = data[2];
  v.bytes = std::string_view(reinterpret_cast<const char*>(data + 3), size - 3);
  fuzz::DecodeAs(type, v);
  // The same bytes as the packed return values of a multi-return call.
  if (auto parts = worker::UnpackReturns(v.bytes); parts.ok()) {
    for (const auto& part : *parts) fuzz::DecodeAs(type, part);
  }

  // The element of a std::vector argument: [value, value] joined into one msgpack array.
  std::string joined;
  worker::AppendMsgpackArrayHeader(&joined, 2);
  if (worker::AppendAsMsgpack(v, &joined).ok() && worker::AppendAsMsgpack(v, &joined).ok()) {
    internal::ValueView list{internal::ValueFormat::kMsgpack, internal::DType::kNone, joined,
                             nullptr};
    fuzz::DecodeAs(type, list);
  }
  return 0;
}
