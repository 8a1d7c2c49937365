#include "raio/rpc/service.h"

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
