// The few runtime entry points that decoding an ObjectRef reaches (include/raio/
// internal/runtime.h), without a cluster: an unpacked ObjectRef is adopted and counted
// here instead of registering this process as a borrower. A nil id, which a real owner
// would not know, gets ObjectLostError as the runtime would give.
#include "raio/internal/runtime.h"

namespace raio::internal {

void OnObjectRefDeserialized(const ObjectId& id, const OwnerInfo& owner) {
  (void)owner;
  if (id.IsNil()) throw ObjectLostError("nil object id in a value");
}
void AddLocalReference(const ObjectId&) {}
std::string DemangledTypeName(const std::type_info& type) { return type.name(); }
void RemoveLocalReference(const ObjectId&) {}

}  // namespace raio::internal
