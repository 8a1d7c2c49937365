// Store files: how the object store's shared-memory files are named, and the sweep that
// removes the ones whose creator died.
//
// A store file is a tmpfs file holding a node's whole object store (pre-faulted, so
// its pages are real memory). The node daemon unlinks it when it stops, but a SIGKILLed
// daemon or embedded driver cannot, and tmpfs keeps the pages until someone does. So
// the name records its creator:
//
//   raio-store-<pid>-<start ticks>-<pid namespace>-<6 random characters>
//
// start ticks: field 22 of /proc/<pid>/stat, which tells the creator from a later
// process that reuses its pid; pid namespace: the inode of /proc/self/ns/pid, since a
// pid from another namespace (a container sharing /dev/shm) names some other process
// here. Every node start and `raio stop` sweep /dev/shm: a stamped file of this user
// whose creator, in this pid namespace, is gone is unlinked. Files in the older
// anonymous form (raio-store-XXXXXX), of other users, from other namespaces, or of
// live processes are never touched.
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "raio/common/process.h"

namespace raio::node {

inline constexpr char kDefaultShmDir[] = "/dev/shm";
inline constexpr char kStoreFilePrefix[] = "raio-store-";

// The creator a store file's name records.
struct StoreFileCreator {
  ProcessStamp process;
  uint64_t pid_namespace = 0;
};

// The name up to its random part, "raio-store-<pid>-<start ticks>-<pid namespace>-";
// mkstemp's XXXXXX follows.
std::string StoreFileStem(const StoreFileCreator& creator);
// This process's stem; just "raio-store-" (the anonymous form, which no sweep removes)
// when /proc does not give this process's start time or pid namespace.
std::string SelfStoreFileStem();
// The creator recorded in `file_name` (a base name, no directory); nullopt for any
// name not in the stamped form.
std::optional<StoreFileCreator> ParseStoreFileName(std::string_view file_name);

struct StoreSweepOptions {
  std::string dir = kDefaultShmDir;
  // Only files of this owner are removed; default: the effective uid.
  std::optional<uid_t> uid;
  // Only files whose creator lived in this pid namespace are judged; default: ours.
  std::optional<uint64_t> pid_namespace;
};
// Unlinks the store files in `options.dir` whose creator is gone (see the top
// comment) and logs each at info level with the memory it gives back. Returns how many
// files and how many allocated bytes. Errors (an unreadable directory, a file that
// vanished meanwhile) skip the file. Does not block beyond the file system calls.
Reclaimed ReclaimStaleStoreFiles(const StoreSweepOptions& options = {});

}  // namespace raio::node
