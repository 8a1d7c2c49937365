// Device sets: the GPU instances (ids 0..n-1 in the node's own numbering) a worker
// process is started for, and the CUDA_VISIBLE_DEVICES value that shows it exactly
// those devices. CUDA reads CUDA_VISIBLE_DEVICES once, when a process initialises it, so
// the value is fixed at spawn and a worker serves one device set for its whole life.
// Threading: values and pure functions.
#pragma once

#include <string>
#include <vector>

namespace raio::node {

// GPU ids, ascending and unique (Allocation::GpuIds() order).
using DeviceSet = std::vector<int>;

// The node's own CUDA_VISIBLE_DEVICES (may be null) split at commas: entry i is the
// device that GPU id i stands for. Empty when unset or empty (then id i is device i).
std::vector<std::string> ParseDeviceMask(const char* cuda_visible_devices);

// The CUDA_VISIBLE_DEVICES value for a worker holding `gpus`: each id mapped through
// `node_mask` (an id past its end is used as is), comma-separated; "" for no GPUs.
std::string VisibleDevices(const DeviceSet& gpus, const std::vector<std::string>& node_mask);

}  // namespace raio::node
