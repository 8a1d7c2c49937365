// ObjectRef<T>: a typed future for an immutable object owned by the process that made
// it (by submitting the task or calling Put). Copies count as references; when the last
// copy in the process goes, the object is freed.
// Thread-safety: an ObjectRef may be copied, destroyed and Get() from any thread.
#pragma once

#include <chrono>
#include <optional>
#include <utility>

#include "raio/internal/object_id.h"
#include "raio/internal/runtime.h"
#include "raio/serialization.h"

namespace raio {

template <typename T>
class ObjectRef {
 public:
  using ValueType = T;
  struct Adopt {};

  // A nil reference; Get() on it throws ObjectLostError.
  ObjectRef() = default;
  // Takes over one local reference already counted for `id` (runtime use).
  ObjectRef(const ObjectId& id, Adopt) : id_(id) {}
  ObjectRef(const ObjectRef& other) : id_(other.id_) {
    if (!id_.IsNil()) internal::AddLocalReference(id_);
  }
  ObjectRef(ObjectRef&& other) noexcept : id_(std::exchange(other.id_, ObjectId())) {}
  ObjectRef& operator=(const ObjectRef& other) {
    if (this != &other) {
      ObjectRef copy(other);
      std::swap(id_, copy.id_);
    }
    return *this;
  }
  ObjectRef& operator=(ObjectRef&& other) noexcept {
    if (this != &other) {
      Reset();
      id_ = std::exchange(other.id_, ObjectId());
    }
    return *this;
  }
  ~ObjectRef() { Reset(); }

  const ObjectId& ID() const { return id_; }
  bool IsNil() const { return id_.IsNil(); }

  // Blocks until the object is ready and returns its value (a copy deserialized from the
  // stored bytes; for T = raio::Buffer a zero-copy view). Throws the object's error: TaskError (the
  // function threw), WorkerCrashedError, UnschedulableError, RemoteFunctionNotFoundError,
  // SerializationError (T does not match the stored value), ObjectLostError,
  // ObjectStoreFullError (the result is larger than one object may be: the message names
  // the function, the size and the limit). InvalidUsageError after raio::Shutdown.
  T Get() const { return Decode(internal::GetObject(id_, std::nullopt)); }

  // As Get(), but throws GetTimeoutError when the object is not ready within `timeout`;
  // the task keeps running. A negative timeout throws InvalidUsageError.
  template <typename Rep, typename Period>
  T Get(std::chrono::duration<Rep, Period> timeout) const {
    return Decode(
        internal::GetObject(id_, std::chrono::duration_cast<std::chrono::microseconds>(timeout)));
  }

  // For ObjectRef<std::vector<E>> with arithmetic E: a read-only view of the elements.
  // An object in this node's shared-memory store is mapped in place (nothing copied) and
  // stays pinned while the view lives; a small inline object is viewed in this process.
  // Blocks like Get(); throws like Get().
  template <typename U = T>
  requires internal::ArrayTraits<U>::value ArrayView<typename internal::ArrayTraits<U>::Element>
  GetView()
  const {
    return internal::DecodeView<typename internal::ArrayTraits<U>::Element>(
        internal::GetObject(id_, std::nullopt));
  }

 private:
  static T Decode(const internal::ValueView& value) {
    if constexpr (std::is_void_v<T>) {
      (void)value;
    } else {
      return internal::Decode<T>(value);
    }
  }
  void Reset() {
    if (!id_.IsNil()) internal::RemoveLocalReference(id_);
    id_ = ObjectId();
  }
  ObjectId id_;
};

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {};

}  // namespace raio

// ObjectRefs may be nested inside values (a std::vector<ObjectRef<T>>, a struct field, a
// task's result): they are packed as [object id, owner id, owner address], and unpacking
// one registers the receiving process as a borrower, so the object lives as long as any
// reference anywhere.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {
  template <typename T>
  struct pack<raio::ObjectRef<T>> {
    template <typename Stream>
    msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o,
                                        const raio::ObjectRef<T>& ref) const {
      raio::internal::OwnerInfo owner = raio::internal::OnObjectRefSerialized(ref.ID());
      std::string id = ref.ID().Binary();
      o.pack_array(3);
      o.pack_bin(static_cast<uint32_t>(id.size()));
      o.pack_bin_body(id.data(), static_cast<uint32_t>(id.size()));
      o.pack_bin(static_cast<uint32_t>(owner.owner_worker_id.size()));
      o.pack_bin_body(owner.owner_worker_id.data(),
                      static_cast<uint32_t>(owner.owner_worker_id.size()));
      o.pack(owner.owner_address);
      return o;
    }
  };
  template <typename T>
  struct convert<raio::ObjectRef<T>> {
    const msgpack::object& operator()(const msgpack::object& o, raio::ObjectRef<T>& ref) const {
      if (o.type != msgpack::type::ARRAY || o.via.array.size != 3 ||
          o.via.array.ptr[0].type != msgpack::type::BIN ||
          o.via.array.ptr[0].via.bin.size != raio::ObjectId::kSize) {
        throw msgpack::type_error();
      }
      const auto& a = o.via.array.ptr;
      raio::ObjectId id =
          raio::ObjectId::FromBinary(std::string_view(a[0].via.bin.ptr, a[0].via.bin.size));
      raio::internal::OwnerInfo owner;
      if (a[1].type == msgpack::type::BIN)
        owner.owner_worker_id.assign(a[1].via.bin.ptr, a[1].via.bin.size);
      a[2].convert(owner.owner_address);
      raio::internal::OnObjectRefDeserialized(id, owner);
      ref = raio::ObjectRef<T>(id, typename raio::ObjectRef<T>::Adopt{});
      return o;
    }
  };
  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
