#include "raio/rpc/frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace raio::rpc {

namespace {
template <typename T>
void Put(char* out, T v) {
  std::memcpy(out, &v, sizeof(T));  // hosts are little-endian (x86-64, aarch64)
}
template <typename T>
T Take(const char* in) {
  T v;
  std::memcpy(&v, in, sizeof(T));
  return v;
}

// Checks and reads the first kFrameHeaderBytes (common to both versions); `*version` is
// kFrameVersion or kTailFrameVersion on success.
absl::Status DecodeCommon(const char* in, uint32_t max_body_bytes, FrameHeader* h,
                          uint8_t* version) {
  uint16_t magic = Take<uint16_t>(in);
  if (magic != kFrameMagic) {
    return absl::InvalidArgumentError(absl::StrCat("bad frame magic 0x", absl::Hex(magic),
                                                   " (the peer does not speak raio's protocol)"));
  }
  *version = Take<uint8_t>(in + 2);
  if (*version != kFrameVersion && *version != kTailFrameVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported frame version ", *version,
                                                   " (this build speaks ", kFrameVersion, " and ",
                                                   kTailFrameVersion, ")"));
  }
  uint8_t kind = Take<uint8_t>(in + 3);
  if (kind > static_cast<uint8_t>(FrameKind::kOneWay)) {
    return absl::InvalidArgumentError(absl::StrCat("bad frame kind ", kind));
  }
  h->kind = static_cast<FrameKind>(kind);
  h->method = Take<uint32_t>(in + 4);
  h->request_id = Take<uint64_t>(in + 8);
  h->body_bytes = Take<uint32_t>(in + 16);
  h->tail_bytes = 0;
  if (h->body_bytes > max_body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame body of ", h->body_bytes,
                                                   " bytes exceeds the limit of ", max_body_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::size_t EncodeFrameHeader(const FrameHeader& h, char* out) {
  const bool tail = h.tail_bytes > 0;
  Put<uint16_t>(out, kFrameMagic);
  Put<uint8_t>(out + 2, tail ? kTailFrameVersion : kFrameVersion);
  Put<uint8_t>(out + 3, static_cast<uint8_t>(h.kind));
  Put<uint32_t>(out + 4, h.method);
  Put<uint64_t>(out + 8, h.request_id);
  Put<uint32_t>(out + 16, h.body_bytes);
  if (!tail) return kFrameHeaderBytes;
  Put<uint32_t>(out + 20, h.tail_bytes);
  return kTailFrameHeaderBytes;
}

absl::StatusOr<std::size_t> ParseFrameHeader(std::string_view in, uint32_t max_body_bytes,
                                             FrameHeader* h) {
  if (in.size() < kFrameHeaderBytes) return 0;
  uint8_t version = 0;
  if (absl::Status s = DecodeCommon(in.data(), max_body_bytes, h, &version); !s.ok()) return s;
  if (version == kFrameVersion) return kFrameHeaderBytes;
  if (in.size() < kTailFrameHeaderBytes) return 0;
  h->tail_bytes = Take<uint32_t>(in.data() + 20);
  if (h->tail_bytes > h->body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame tail of ", h->tail_bytes,
                                                   " bytes is longer than its body of ",
                                                   h->body_bytes, " bytes"));
  }
  return kTailFrameHeaderBytes;
}

absl::Status DecodeFrameHeader(const char* in, uint32_t max_body_bytes, FrameHeader* h) {
  uint8_t version = 0;
  if (absl::Status s = DecodeCommon(in, max_body_bytes, h, &version); !s.ok()) return s;
  if (version != kFrameVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame version ", version, " has a ", kTailFrameHeaderBytes,
                     "-byte header; DecodeFrameHeader reads version ", kFrameVersion, " only"));
  }
  return absl::OkStatus();
}

}  // namespace raio::rpc
