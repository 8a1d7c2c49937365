// Value encoding for task arguments, results and Put.
//
// Three formats:
// - msgpack (msgpack-cxx): builtins, std::string, STL containers, and user structs that
//   opt in with RAIO_SERIALIZE(field1, field2, ...) inside their definition;
// - arrays: std::vector<E> of an arithmetic E (not bool) is stored as its raw bytes with
//   a dtype tag, so that a reader on the same node can view it in place (ArrayView) and
//   a Put copies it exactly once;
// - raw bytes: raio::Buffer.
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <msgpack.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "raio/buffer.h"
#include "raio/errors.h"
#include "raio/export.h"

// Makes a struct serializable: list its fields, in order, inside the struct.
//   struct Config { double lr; int hidden; RAIO_SERIALIZE(lr, hidden); };
#define RAIO_SERIALIZE(...) MSGPACK_DEFINE(__VA_ARGS__)

namespace raio {
namespace internal {

// kReturns: the several return values of one call (a function returning std::tuple),
// each a (format, dtype, value) part (PackReturns); never the format of a stored object.
enum class ValueFormat : uint8_t { kMsgpack = 0, kRaw = 1, kArray = 2, kReturns = 3 };
enum class DType : uint8_t {
  kNone = 0,
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF32,
  kF64,
  kChar
};

template <typename E>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<E, char>)
    return DType::kChar;
  else if constexpr (std::is_same_v<E, float>)
    return DType::kF32;
  else if constexpr (std::is_same_v<E, double>)
    return DType::kF64;
  else if constexpr (std::is_signed_v<E> && sizeof(E) == 1)
    return DType::kI8;
  else if constexpr (std::is_unsigned_v<E> && sizeof(E) == 1)
    return DType::kU8;
  else if constexpr (std::is_signed_v<E> && sizeof(E) == 2)
    return DType::kI16;
  else if constexpr (std::is_unsigned_v<E> && sizeof(E) == 2)
    return DType::kU16;
  else if constexpr (std::is_signed_v<E> && sizeof(E) == 4)
    return DType::kI32;
  else if constexpr (std::is_unsigned_v<E> && sizeof(E) == 4)
    return DType::kU32;
  else if constexpr (std::is_signed_v<E> && sizeof(E) == 8)
    return DType::kI64;
  else if constexpr (std::is_unsigned_v<E> && sizeof(E) == 8)
    return DType::kU64;
  else
    return DType::kNone;
}

// Which std::vector types are stored as raw arrays.
template <typename T>
struct ArrayTraits : std::false_type {};
template <typename E>
requires(std::is_arithmetic_v<E> && !std::is_same_v<E, bool> &&
         !std::is_same_v<E, long double>) struct ArrayTraits<std::vector<E>> : std::true_type {
  using Element = E;
};

// A value to be sent or stored: its format and bytes.
struct EncodedValue {
  ValueFormat format = ValueFormat::kMsgpack;
  DType dtype = DType::kNone;
  std::string bytes;
};

// A read-only view of a stored value; `keeper` keeps the bytes (and any store pin) alive.
struct ValueView {
  ValueFormat format = ValueFormat::kMsgpack;
  DType dtype = DType::kNone;
  std::string_view bytes;
  std::shared_ptr<const void> keeper;
};

// Appends msgpack output straight into a std::string.
struct StringWriter {
  std::string* out;
  void write(const char* data, std::size_t size) { out->append(data, size); }
};

// Serializes `value` to msgpack bytes.
template <typename T>
std::string Pack(const T& value) {
  std::string out;
  StringWriter writer{&out};
  msgpack::pack(writer, value);
  return out;
}

// msgpack bytes of nil: the value of ObjectRef<void>.
inline std::string PackNil() { return std::string(1, static_cast<char>(0xc0)); }

// Sums the elements that the container headers of one msgpack value claim (a map entry
// counts twice). Each element takes at least one byte of its own, so a well-formed value
// of n bytes claims at most n. msgpack reserves room for a container as soon as it reads
// the header; refusing over-claims first bounds that room to a multiple of n, where a
// 5-byte map header from a peer made it allocate 256 GiB, and 4 KiB of nested array
// headers about 130 MiB.
struct ClaimedElements : msgpack::null_visitor {
  std::size_t limit = 0;
  std::size_t claimed = 0;
  bool start_array(uint32_t n) { return (claimed += n) <= limit; }
  bool start_map(uint32_t n) { return (claimed += 2 * std::size_t{n}) <= limit; }
};

// The C++ name of a type ("std::vector<int>"), for error messages (libraio).
RAIO_EXPORT std::string DemangledTypeName(const std::type_info& type);

// Deserializes msgpack `bytes` into T. Throws SerializationError when the bytes are
// malformed or hold a value of another type.
template <typename T>
T Unpack(std::string_view bytes) {
  ClaimedElements claims;
  claims.limit = bytes.size();
  std::size_t offset = 0;
  if (!msgpack::parse(bytes.data(), bytes.size(), offset, claims) &&
      claims.claimed > claims.limit) {
    throw SerializationError("cannot decode a value as " + DemangledTypeName(typeid(T)) +
                             ": its containers claim more elements than its " +
                             std::to_string(bytes.size()) + " bytes can hold");
  }
  try {
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
    T value;
    handle.get().convert(value);
    return value;
  } catch (const std::exception& e) {
    throw SerializationError("cannot decode a value as " + DemangledTypeName(typeid(T)) + ": " +
                             e.what());
  }
}

// Encodes a value in its format (see the file comment).
template <typename T>
EncodedValue Encode(const T& value) {
  EncodedValue out;
  if constexpr (std::is_same_v<T, Buffer>) {
    out.format = ValueFormat::kRaw;
    out.bytes.assign(reinterpret_cast<const char*>(value.data()), value.size());
  } else if constexpr (ArrayTraits<T>::value) {
    using E = typename ArrayTraits<T>::Element;
    out.format = ValueFormat::kArray;
    out.dtype = DTypeOf<E>();
    out.bytes.assign(reinterpret_cast<const char*>(value.data()), value.size() * sizeof(E));
  } else {
    out.bytes = Pack(value);
  }
  return out;
}

// Decodes a stored value as T. Throws SerializationError when it holds another type.
template <typename T>
T Decode(const ValueView& v) {
  if constexpr (std::is_same_v<T, Buffer>) {
    return Buffer(v.keeper, reinterpret_cast<const uint8_t*>(v.bytes.data()), v.bytes.size());
  } else {
    if constexpr (ArrayTraits<T>::value) {
      using E = typename ArrayTraits<T>::Element;
      if (v.format == ValueFormat::kArray) {
        if (v.dtype != DTypeOf<E>() || v.bytes.size() % sizeof(E) != 0) {
          throw SerializationError(std::string("the object is an array of another element type, "
                                               "not ") +
                                   typeid(T).name());
        }
        T out(v.bytes.size() / sizeof(E));
        if (!out.empty()) std::memcpy(out.data(), v.bytes.data(), v.bytes.size());
        return out;
      }
    }
    if (v.format != ValueFormat::kMsgpack) {
      throw SerializationError(std::string("the object holds ") +
                               (v.format == ValueFormat::kRaw ? "raw bytes" : "an array") +
                               ", not a " + typeid(T).name());
    }
    return Unpack<T>(v.bytes);
  }
}

// A zero-copy array view of a stored value when it is an array of E; otherwise decodes.
template <typename E>
ArrayView<E> DecodeView(const ValueView& v) {
  if (v.format == ValueFormat::kArray && v.dtype == DTypeOf<E>() &&
      v.bytes.size() % sizeof(E) == 0 &&
      reinterpret_cast<uintptr_t>(v.bytes.data()) % alignof(E) == 0) {
    return ArrayView<E>(v.keeper, reinterpret_cast<const E*>(v.bytes.data()),
                        v.bytes.size() / sizeof(E));
  }
  return ArrayView<E>(Decode<std::vector<E>>(v));
}

}  // namespace internal
}  // namespace raio
