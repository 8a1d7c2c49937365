// Strong id types of raio's internals (ObjectId is public: include/raio/internal/object_id.h).
// Thread-safety: plain values. FromRandom() is thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "raio/internal/object_id.h"

namespace raio {

struct WorkerIdTag {};
struct NodeIdTag {};
struct LeaseIdTag {};
struct TaskIdTag {};
struct PlacementGroupIdTag {};

using WorkerId = internal::BinaryId<8, WorkerIdTag>;
using NodeId = internal::BinaryId<8, NodeIdTag>;
using LeaseId = internal::BinaryId<8, LeaseIdTag>;
// 8 bytes of the submitting worker's id + an 8-byte sequence number.
using TaskId = internal::BinaryId<16, TaskIdTag>;
using JobId = uint32_t;
using PlacementGroupId = internal::BinaryId<8, PlacementGroupIdTag>;

// Fills an id with random bytes from a process-wide generator seeded by the OS.
void FillRandom(uint8_t* data, std::size_t size);

template <typename Id>
Id RandomId() {
  Id id;
  FillRandom(id.mutable_data(), Id::kSize);
  return id;
}

// TaskId of the `sequence`-th task submitted by `worker`.
TaskId MakeTaskId(const WorkerId& worker, uint64_t sequence);
// ObjectId of return `index` of `task` (index 1 is the single return; puts use
// index 0x80000000 + n under a pseudo task).
ObjectId MakeObjectId(const TaskId& task, uint32_t index);
// The task whose return `id` is (for a Put, its pseudo task, which no task shares).
TaskId TaskIdOf(const ObjectId& id);

}  // namespace raio
