// Spill files: an object's bytes written to local disk when the object store is
// full, and read back when a client pins the object again. One file per object,
// holding exactly the object's bytes (no header: the store keeps size and id in
// memory, and spill files do not outlive the store).
// Threading: free functions with no shared state; they block on disk I/O.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace raio::node {

// Creates or truncates `path` (mode 0600) and writes `size` bytes from `data`. On
// failure (Internal, with errno's text) no partial file is left behind. No fsync:
// spill files only need to outlive memory pressure, not a crash.
[[nodiscard]] absl::Status WriteSpillFile(const std::string& path, const uint8_t* data,
                                          uint64_t size);
// Reads exactly `size` bytes of `path` into `data`. NotFound if the file is missing,
// DataLoss if its length is not `size`, Internal on other I/O errors.
[[nodiscard]] absl::Status ReadSpillFile(const std::string& path, uint8_t* data, uint64_t size);
// Removes `path`; a missing file is not an error (logged otherwise).
void RemoveSpillFile(const std::string& path);

}  // namespace raio::node
