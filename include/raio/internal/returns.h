// Several return values (Ray's num_returns): a remote function or actor method whose
// result type is std::tuple<T...> returns sizeof...(T) objects, one per element, so that
// each can be passed on, waited for and freed alone:
//
//   std::tuple<int, std::string> Split(std::string s);
//   auto [n, rest] = raio::Task(Split).Remote("a b");   // ObjectRef<int>, ObjectRef<string>
//
// (A tuple stored as one object: return a struct or a std::pair.) The static type of the
// result follows the function's, so no runtime count can be set: a std::vector result is
// always one object.
// Thread-safety: stateless templates.
#pragma once

#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "raio/internal/object_id.h"
#include "raio/internal/runtime.h"
#include "raio/object_ref.h"
#include "raio/serialization.h"

namespace raio::internal {

template <typename R>
struct ReturnsOf {
  static constexpr bool kTuple = false;
  static constexpr int kCount = 1;
  using Refs = ObjectRef<R>;
};
template <typename... T>
struct ReturnsOf<std::tuple<T...>> {
  static_assert(sizeof...(T) >= 1, "a remote function cannot return an empty std::tuple");
  static constexpr bool kTuple = true;
  static constexpr int kCount = static_cast<int>(sizeof...(T));
  using Refs = std::tuple<ObjectRef<T>...>;
};

// What Remote() gives for a function returning R.
template <typename R>
using RemoteResult = typename ReturnsOf<R>::Refs;

// Return `index` (0-based) of the call whose first return object is `first`: the same
// task id, with return number index + 1 in the last four bytes (see MakeObjectId).
inline ObjectId NthReturnId(const ObjectId& first, uint32_t index) {
  ObjectId id = first;
  uint32_t n = index + 1;
  std::memcpy(id.mutable_data() + ObjectId::kSize - sizeof(n), &n, sizeof(n));
  return id;
}

// Adopts the references SubmitTask/SubmitActorTask took on each return object.
template <typename R>
RemoteResult<R> AdoptReturns(const ObjectId& first) {
  if constexpr (ReturnsOf<R>::kTuple) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return RemoteResult<R>(ObjectRef<std::tuple_element_t<I, R>>(
          NthReturnId(first, static_cast<uint32_t>(I)),
          typename ObjectRef<std::tuple_element_t<I, R>>::Adopt{})...);
    }
    (std::make_index_sequence<ReturnsOf<R>::kCount>{});
  } else {
    return ObjectRef<R>(first, typename ObjectRef<R>::Adopt{});
  }
}

// Packs encoded return values: per part, format (1 byte), dtype (1 byte), size (8 bytes,
// little-endian) and the bytes.
inline EncodedValue PackReturns(std::vector<EncodedValue> parts) {
  EncodedValue out;
  out.format = ValueFormat::kReturns;
  std::size_t total = 0;
  for (const auto& p : parts) total += 10 + p.bytes.size();
  out.bytes.reserve(total);
  for (const auto& p : parts) {
    out.bytes.push_back(static_cast<char>(p.format));
    out.bytes.push_back(static_cast<char>(p.dtype));
    uint64_t n = p.bytes.size();
    char size[8];
    std::memcpy(size, &n, sizeof(n));
    out.bytes.append(size, sizeof(size));
    out.bytes.append(p.bytes);
  }
  return out;
}

// Encodes each element of a tuple result as its own return value.
template <typename... T>
EncodedValue EncodeReturns(std::tuple<T...>&& values) {
  std::vector<EncodedValue> parts;
  parts.reserve(sizeof...(T));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((SetEncodingReturn(static_cast<uint32_t>(I)), parts.push_back(Encode(std::get<I>(values)))),
     ...);
  }
  (std::index_sequence_for<T...>{});
  SetEncodingReturn(0);
  return PackReturns(std::move(parts));
}

}  // namespace raio::internal
