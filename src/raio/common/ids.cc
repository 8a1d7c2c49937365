#include "raio/common/ids.h"

#include <cstring>
#include <mutex>
#include <random>

namespace raio {

void FillRandom(uint8_t* data, std::size_t size) {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  for (std::size_t i = 0; i < size; i += 8) {
    uint64_t r = gen();
    std::memcpy(data + i, &r, std::min<std::size_t>(8, size - i));
  }
}

TaskId MakeTaskId(const WorkerId& worker, uint64_t sequence) {
  TaskId id;
  std::memcpy(id.mutable_data(), worker.data(), WorkerId::kSize);
  std::memcpy(id.mutable_data() + WorkerId::kSize, &sequence, sizeof(sequence));
  return id;
}

ObjectId MakeObjectId(const TaskId& task, uint32_t index) {
  ObjectId id;
  std::memcpy(id.mutable_data(), task.data(), TaskId::kSize);
  std::memcpy(id.mutable_data() + TaskId::kSize, &index, sizeof(index));
  return id;
}

TaskId TaskIdOf(const ObjectId& id) {
  TaskId task;
  std::memcpy(task.mutable_data(), id.data(), TaskId::kSize);
  return task;
}

}  // namespace raio
