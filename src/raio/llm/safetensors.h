// Reader and writer of the safetensors format: an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the raw little-endian tensor bytes.
// Free functions over value types; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace raio::llm {

// One tensor converted to float32 on read.
struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

// Reads every tensor of `path`; F32, F16 and BF16 are converted to float32, other dtypes
// are refused. NotFound if the file cannot be opened; InvalidArgument (naming the file
// and tensor) on a malformed header, offsets outside the data or a size that does not
// match the shape. Blocks on file I/O.
absl::StatusOr<std::map<std::string, FloatTensor>> ReadSafetensors(const std::string& path);

// Writes `tensors` as F32 (names sorted, data packed in that order). Internal on an I/O
// failure.
absl::Status WriteSafetensors(const std::map<std::string, FloatTensor>& tensors,
                              const std::string& path);

}  // namespace raio::llm
