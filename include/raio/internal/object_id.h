// Strong, fixed-size binary ids. ObjectId is part of the public API (held by
// ObjectRef); the other id types live in src/raio/common/ids.h.
// Thread-safety: plain values; safe to copy across threads.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

namespace raio {
namespace internal {

// An id of N bytes; Tag makes ids of different kinds distinct types.
template <std::size_t N, typename Tag>
class BinaryId {
 public:
  static constexpr std::size_t kSize = N;
  BinaryId() { bytes_.fill(0); }
  // Builds an id from exactly N bytes; returns a nil id when the size is wrong.
  static BinaryId FromBinary(std::string_view b) {
    BinaryId id;
    if (b.size() == N) std::memcpy(id.bytes_.data(), b.data(), N);
    return id;
  }
  std::string Binary() const {
    return std::string(reinterpret_cast<const char*>(bytes_.data()), N);
  }
  std::string Hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(2 * N, '0');
    for (std::size_t i = 0; i < N; ++i) {
      out[2 * i] = kDigits[bytes_[i] >> 4];
      out[2 * i + 1] = kDigits[bytes_[i] & 0xf];
    }
    return out;
  }
  bool IsNil() const {
    for (auto b : bytes_)
      if (b != 0) return false;
    return true;
  }
  const uint8_t* data() const { return bytes_.data(); }
  uint8_t* mutable_data() { return bytes_.data(); }
  bool operator==(const BinaryId& o) const { return bytes_ == o.bytes_; }
  bool operator!=(const BinaryId& o) const { return bytes_ != o.bytes_; }
  bool operator<(const BinaryId& o) const { return bytes_ < o.bytes_; }
  template <typename H>
  friend H AbslHashValue(H h, const BinaryId& id) {
    return H::combine_contiguous(std::move(h), id.bytes_.data(), N);
  }
  struct Hasher {
    std::size_t operator()(const BinaryId& id) const {
      std::size_t h = 1469598103934665603ull;  // FNV-1a over the bytes
      for (auto b : id.bytes_) h = (h ^ b) * 1099511628211ull;
      return h;
    }
  };

 private:
  std::array<uint8_t, N> bytes_;
};

struct ObjectIdTag {};
struct ActorIdTag {};

}  // namespace internal

// Names one actor for its whole life, across restarts: 16 random bytes.
using ActorId = internal::BinaryId<16, internal::ActorIdTag>;

// Identifies one immutable object: 16 bytes of the creating task's id followed by a
// 4-byte return index (puts use indexes from 0x80000000 up).
using ObjectId = internal::BinaryId<20, internal::ObjectIdTag>;

}  // namespace raio
