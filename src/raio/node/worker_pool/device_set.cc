#include "raio/node/worker_pool/device_set.h"

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace raio::node {

std::vector<std::string> ParseDeviceMask(const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr || *cuda_visible_devices == '\0') return {};
  return absl::StrSplit(cuda_visible_devices, ',');
}

std::string VisibleDevices(const DeviceSet& gpus, const std::vector<std::string>& node_mask) {
  std::vector<std::string> devices;
  devices.reserve(gpus.size());
  for (int id : gpus) {
    devices.push_back(id >= 0 && static_cast<std::size_t>(id) < node_mask.size()
                          ? node_mask[static_cast<std::size_t>(id)]
                          : std::to_string(id));
  }
  return absl::StrJoin(devices, ",");
}

}  // namespace raio::node
