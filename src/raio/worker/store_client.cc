#include "raio/worker/store_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"

namespace raio::worker {

namespace {
constexpr uint32_t kObjectMagic = 0x424f4152;  // "RAOB"

struct ObjectHeader {
  uint32_t magic;
  uint8_t format;
  uint8_t dtype;
  uint16_t reserved;
  uint64_t payload_bytes;
};
static_assert(sizeof(ObjectHeader) <= StoreClient::kHeaderBytes);
}  // namespace

struct StoreClient::Mapping {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (base != nullptr) ::munmap(base, size);
  }
};

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Create(
    std::shared_ptr<rpc::Connection> node, UniqueFd store_fd, uint64_t size_bytes) {
  if (!store_fd.valid()) {
    return absl::InvalidArgumentError("no object store descriptor to map");
  }
  if (size_bytes == 0) return absl::InvalidArgumentError("the object store's size is 0");
  struct stat st {};
  if (::fstat(store_fd.get(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the object store descriptor is unusable: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the object store descriptor is not the node's store: expected a memory file of ",
        size_bytes, " bytes, got ",
        S_ISREG(st.st_mode) ? absl::StrCat("one of ", st.st_size, " bytes")
                            : std::string("something that is not a file")));
  }
  void* base = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, store_fd.get(), 0);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("cannot map the object store: ", std::strerror(errno)));
  }
  // store_fd closes here; the mapping keeps the memory.
  auto mapping = std::make_shared<Mapping>();
  mapping->base = static_cast<uint8_t*>(base);
  mapping->size = size_bytes;
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(node), std::move(mapping)));
}

StoreClient::~StoreClient() = default;

uint64_t StoreClient::max_object_bytes() const {
  // The node's allocator manages the capacity rounded down to whole 64-byte blocks.
  uint64_t usable = mapping_->size / kHeaderBytes * kHeaderBytes;
  return usable > kHeaderBytes ? usable - kHeaderBytes : 0;
}

absl::Status StoreClient::Put(const ObjectId& id, const WorkerId& owner,
                              internal::ValueFormat format, internal::DType dtype, const void* data,
                              uint64_t size) {
  if (size > max_object_bytes()) {
    // It could never fit, whatever is evicted or spilled: say so rather than "full".
    return absl::ResourceExhaustedError(absl::StrCat(
        "an object of ", size, " bytes is larger than the node's object store allows: at most ",
        max_object_bytes(), " bytes per object (the store's capacity, ", mapping_->size,
        " bytes, less a ", kHeaderBytes,
        "-byte header); give the store more memory (InitOptions::object_store_memory_bytes, "
        "`raio start --object-store-memory`)"));
  }
  proto::CreateObjectRequest create;
  create.set_object_id(id.Binary());
  create.set_size_bytes(kHeaderBytes + size);
  create.set_owner_worker_id(owner.Binary());
  const std::chrono::milliseconds wait =
      std::max(config::object_store_full_wait_ms(), std::chrono::milliseconds(0));
  create.set_wait_ms(static_cast<uint64_t>(wait.count()));
  auto reply =
      rpc::CallSync(*node_, proto::CREATE_OBJECT, create, wait + config::control_rpc_timeout_ms());
  if (!reply.ok()) return reply.status();
  proto::ObjectLocationReply loc;
  if (!loc.ParseFromString(*reply) || loc.offset() + kHeaderBytes + size > mapping_->size) {
    return absl::InternalError("the node returned a bad object location");
  }
  uint8_t* dst = mapping_->base + loc.offset();
  ObjectHeader header{kObjectMagic, static_cast<uint8_t>(format), static_cast<uint8_t>(dtype), 0,
                      size};
  std::memcpy(dst, &header, sizeof(header));
  if (size > 0) std::memcpy(dst + kHeaderBytes, data, size);
  proto::ObjectIdRequest seal;
  seal.set_object_id(id.Binary());
  auto sealed = rpc::CallSync(*node_, proto::SEAL_OBJECT, seal, config::control_rpc_timeout_ms());
  return sealed.ok() ? absl::OkStatus() : sealed.status();
}

absl::StatusOr<internal::ValueView> StoreClient::Get(const ObjectId& id) {
  proto::ObjectIdRequest pin;
  pin.set_object_id(id.Binary());
  auto reply = rpc::CallSync(*node_, proto::PIN_OBJECT, pin, config::control_rpc_timeout_ms());
  if (!reply.ok()) return reply.status();
  proto::ObjectLocationReply loc;
  if (!loc.ParseFromString(*reply)) return absl::InternalError("malformed object location");
  return ViewPinned(id, loc.offset(), loc.size_bytes());
}

absl::Status StoreClient::Pull(const proto::PullObjectsRequest& request) {
  return rpc::CallSync(*node_, proto::PULL_OBJECTS, request, std::nullopt).status();
}

absl::StatusOr<std::vector<internal::ValueView>> StoreClient::GetAll(
    const std::vector<ObjectId>& ids) {
  proto::PinObjectsRequest pin;
  for (const auto& id : ids) pin.add_object_ids(id.Binary());
  auto reply = rpc::CallSync(*node_, proto::PIN_OBJECTS, pin, std::nullopt);
  if (!reply.ok()) return reply.status();
  proto::PinObjectsReply locs;
  if (!locs.ParseFromString(*reply) || locs.locations_size() != static_cast<int>(ids.size())) {
    return absl::InternalError("malformed object locations");
  }
  std::vector<internal::ValueView> views;
  views.reserve(ids.size());
  absl::Status bad;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& loc = locs.locations(static_cast<int>(i));
    auto view = ViewPinned(ids[i], loc.offset(), loc.size_bytes());
    if (!view.ok()) {
      bad = view.status();
      continue;  // its keeper unpinned it; the others unpin with `views`
    }
    views.push_back(std::move(*view));
  }
  if (!bad.ok()) return bad;
  return views;
}

absl::StatusOr<internal::ValueView> StoreClient::ViewPinned(const ObjectId& id, uint64_t offset,
                                                            uint64_t size) {
  // Unpins when the last copy of the view goes (also when this returns an error); keeps
  // the mapping alive until then.
  std::weak_ptr<rpc::Connection> weak_node = node_;
  auto keeper =
      std::shared_ptr<const void>(mapping_.get(), [mapping = mapping_, weak_node, id](const void*) {
        if (auto node = weak_node.lock()) {
          proto::ObjectIdRequest unpin;
          unpin.set_object_id(id.Binary());
          node->SendOneWay(proto::UNPIN_OBJECT, unpin);
        }
      });
  if (size < kHeaderBytes || offset + size > mapping_->size) {
    return absl::InternalError("the node returned a bad object location");
  }
  const uint8_t* p = mapping_->base + offset;
  ObjectHeader header;
  std::memcpy(&header, p, sizeof(header));
  if (header.magic != kObjectMagic || kHeaderBytes + header.payload_bytes > size) {
    return absl::DataLossError(absl::StrCat("object ", id.Hex(), " has a corrupt header"));
  }
  internal::ValueView view;
  view.format = static_cast<internal::ValueFormat>(header.format);
  view.dtype = static_cast<internal::DType>(header.dtype);
  view.bytes =
      std::string_view(reinterpret_cast<const char*>(p + kHeaderBytes), header.payload_bytes);
  view.keeper = std::move(keeper);
  return view;
}

void StoreClient::Delete(const ObjectId& id) {
  proto::ObjectIdRequest req;
  req.set_object_id(id.Binary());
  node_->SendOneWay(proto::DELETE_OBJECT, req);
}

}  // namespace raio::worker
