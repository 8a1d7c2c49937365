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
}  // namespace

void EncodeFrameHeader(const FrameHeader& h, char* out) {
  Put<uint16_t>(out, kFrameMagic);
  Put<uint8_t>(out + 2, kFrameVersion);
  Put<uint8_t>(out + 3, static_cast<uint8_t>(h.kind));
  Put<uint32_t>(out + 4, h.method);
  Put<uint64_t>(out + 8, h.request_id);
  Put<uint32_t>(out + 16, h.body_bytes);
}

absl::Status DecodeFrameHeader(const char* in, uint32_t max_body_bytes, FrameHeader* h) {
  uint16_t magic = Take<uint16_t>(in);
  if (magic != kFrameMagic) {
    return absl::InvalidArgumentError(absl::StrCat("bad frame magic 0x", absl::Hex(magic),
                                                   " (the peer does not speak raio's protocol)"));
  }
  uint8_t version = Take<uint8_t>(in + 2);
  if (version != kFrameVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported frame version ", version,
                                                   " (this build speaks ", kFrameVersion, ")"));
  }
  uint8_t kind = Take<uint8_t>(in + 3);
  if (kind > static_cast<uint8_t>(FrameKind::kOneWay)) {
    return absl::InvalidArgumentError(absl::StrCat("bad frame kind ", kind));
  }
  h->kind = static_cast<FrameKind>(kind);
  h->method = Take<uint32_t>(in + 4);
  h->request_id = Take<uint64_t>(in + 8);
  h->body_bytes = Take<uint32_t>(in + 16);
  if (h->body_bytes > max_body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame body of ", h->body_bytes,
                                                   " bytes exceeds the limit of ", max_body_bytes));
  }
  return absl::OkStatus();
}

}  // namespace raio::rpc
