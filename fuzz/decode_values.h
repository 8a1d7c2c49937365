// Decodes one stored or pushed value as the C++ types a remote function commonly takes,
// the way ObjectRef::Get and the task invokers do (raio::internal::Decode). A value from
// a peer must decode or throw a raio exception (SerializationError, or ObjectLostError
// from a nested ObjectRef's owner): anything else escaping, or a crash, is a bug.
// Thread-safety: none needed (fuzzers are single-threaded).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "raio/errors.h"
#include "raio/object_ref.h"
#include "raio/serialization.h"

namespace raio::fuzz {

struct Point {
  double x = 0;
  std::string label;
  std::vector<int> tags;
  RAIO_SERIALIZE(x, label, tags);
};

// Runs `decode` (a decoding to T), which may throw only raio exceptions.
template <typename T, typename F>
void ExpectOnlyRaioExceptions(F decode) {
  try {
    (void)decode();
  } catch (const RaioException&) {
    // A clear, typed error: what a malformed value must give.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Decode<%s> threw a non-raio exception: %s\n", typeid(T).name(), e.what());
    std::abort();
  }
}

template <typename T>
void DecodeOrThrowRaio(const internal::ValueView& v) {
  ExpectOnlyRaioExceptions<T>([&] { return internal::Decode<T>(v); });
}

// The types, by index: what value_fuzzer's third byte picks.
inline constexpr std::size_t kDecodedTypes = 18;
inline void DecodeAs(std::size_t type, const internal::ValueView& v) {
  switch (type % kDecodedTypes) {
    case 0:
      return DecodeOrThrowRaio<int>(v);
    case 1:
      return DecodeOrThrowRaio<int64_t>(v);
    case 2:
      return DecodeOrThrowRaio<double>(v);
    case 3:
      return DecodeOrThrowRaio<bool>(v);
    case 4:
      return DecodeOrThrowRaio<std::string>(v);
    case 5:
      return DecodeOrThrowRaio<std::vector<double>>(v);
    case 6:
      return DecodeOrThrowRaio<std::vector<int32_t>>(v);
    case 7:
      return DecodeOrThrowRaio<std::vector<uint8_t>>(v);
    case 8:
      return DecodeOrThrowRaio<std::vector<std::string>>(v);
    case 9:
      return DecodeOrThrowRaio<std::map<std::string, int>>(v);
    case 10:
      return DecodeOrThrowRaio<std::map<std::string, std::vector<double>>>(v);
    case 11:
      return DecodeOrThrowRaio<Point>(v);
    case 12:
      return DecodeOrThrowRaio<std::vector<Point>>(v);
    case 13:
      return DecodeOrThrowRaio<ObjectRef<int>>(v);
    case 14:
      return DecodeOrThrowRaio<std::vector<ObjectRef<double>>>(v);
    case 15:
      return DecodeOrThrowRaio<Buffer>(v);
    // Views an array in place or decodes it.
    case 16:
      return ExpectOnlyRaioExceptions<ArrayView<float>>(
          [&] { return internal::DecodeView<float>(v); });
    default:
      return ExpectOnlyRaioExceptions<ArrayView<double>>(
          [&] { return internal::DecodeView<double>(v); });
  }
}

inline void DecodeAsCommonTypes(const internal::ValueView& v) {
  for (std::size_t type = 0; type < kDecodedTypes; ++type) DecodeAs(type, v);
}

}  // namespace raio::fuzz
