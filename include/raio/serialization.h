// Value encoding for task arguments, results and Put: msgpack (msgpack-cxx).
// Builtins, std::string and STL containers work as they are; a user struct opts in with
// RAIO_SERIALIZE(field1, field2, ...) inside its definition.
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>
#include <typeinfo>

#include <msgpack.hpp>

#include "raio/errors.h"

// Makes a struct serializable: list its fields, in order, inside the struct.
//   struct Config { double lr; int hidden; RAIO_SERIALIZE(lr, hidden); };
#define RAIO_SERIALIZE(...) MSGPACK_DEFINE(__VA_ARGS__)

namespace raio {
namespace internal {

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

// Deserializes msgpack `bytes` into T. Throws SerializationError when the bytes are
// malformed or hold a value of another type.
template <typename T>
T Unpack(std::string_view bytes) {
  try {
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
    T value;
    handle.get().convert(value);
    return value;
  } catch (const std::exception& e) {
    throw SerializationError(std::string("cannot decode a value as ") + typeid(T).name() +
                             ": " + e.what());
  }
}

}  // namespace internal
}  // namespace raio
