#include "raio/rpc/service.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "raio/common/logging.h"

namespace raio::rpc {

namespace {

// Method number -> table entry (nullptr where raio has none).
const std::array<const MethodInfo*, kMaxMethods>& Table() {
  static const std::array<const MethodInfo*, kMaxMethods> table = [] {
    std::array<const MethodInfo*, kMaxMethods> t{};
#define RAIO_RPC_TABLE_ENTRY(method, request, reply, kind, idempotent, deadline) \
  t[proto::method] = &MethodTraits<proto::method>::kInfo;
    RAIO_RPC_METHODS(RAIO_RPC_TABLE_ENTRY)
#undef RAIO_RPC_TABLE_ENTRY
    return t;
  }();
  return table;
}

}  // namespace

const MethodInfo* FindMethod(uint32_t method) {
  return method < kMaxMethods ? Table()[method] : nullptr;
}

namespace internal {

bool ParseBeforeTail(std::string_view message, int field_number, std::size_t tail_bytes,
                     google::protobuf::MessageLite* reply) {
  if (tail_bytes > 0) {
    using google::protobuf::internal::WireFormatLite;
    uint8_t header[16];
    uint8_t* end = WireFormatLite::WriteTagToArray(
        field_number, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, header);
    end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(tail_bytes, end);
    const std::string_view field_header(reinterpret_cast<const char*>(header),
                                        static_cast<std::size_t>(end - header));
    if (!message.ends_with(field_header)) return false;
    message.remove_suffix(field_header.size());
  }
  return reply->ParseFromArray(message.data(), static_cast<int>(message.size()));
}

}  // namespace internal

void Service::RejectUnknown(const std::shared_ptr<Connection>& conn, const FrameHeader& h) const {
  const MethodInfo* info = FindMethod(h.method);
  std::string what = info != nullptr ? absl::StrCat(std::string(info->name), " (", h.method, ")")
                                     : absl::StrCat("unknown method ", h.method);
  RAIO_LOG_WARN("the {} service does not serve {}, asked by {}", name_, what, conn->peer_name());
  if (h.kind == FrameKind::kRequest) {
    conn->ReplyError(
        h, absl::UnimplementedError(absl::StrCat("the ", name_, " service does not serve ", what)));
  }
}

}  // namespace raio::rpc
