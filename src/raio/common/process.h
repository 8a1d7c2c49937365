// Small process-level facts and helpers: executable path, hostname, CPU and memory
// sizes, demangling, session directories.
// Thread-safety: all functions are thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace raio {

// Absolute path of the running executable (/proc/self/exe).
std::string SelfExecutablePath();
std::string Hostname();
// Online CPU cores.
int DetectCpuCount();
// Physical memory in bytes.
int64_t DetectMemoryBytes();
// Demangled form of a typeid name; the input itself when demangling fails.
std::string Demangle(const char* mangled);
// Makes a fresh private directory under $TMPDIR (or /tmp, also when $TMPDIR is longer
// than 48 bytes, so that Unix socket paths inside fit) named raio-<prefix>-XXXXXX,
// mode 0700. Returns "" on failure.
std::string MakeTempDir(const std::string& prefix);
// Removes a directory tree; errors are ignored.
void RemoveTree(const std::string& path);
// Base directory MakeTempDir uses.
std::string TempBase();
// Removes raio-session-* directories under TempBase() whose owning process (pid in
// their "pid" file) is gone, and the shared-memory files they name in "store" —
// what a SIGKILLed driver or daemon leaves behind.
void CleanStaleSessions();

}  // namespace raio
