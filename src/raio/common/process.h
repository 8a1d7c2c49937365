// Small process-level facts and helpers: executable path, hostname, CPU and memory
// sizes, demangling, whether a recorded process still runs, session directories.
// Thread-safety: all functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
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
// How a reaped child ended, from its waitpid status: "pid 12 exited with code 3", "pid 12
// was killed by signal 6 (SIGABRT: Aborted)[, core dumped]".
std::string DescribeExit(pid_t pid, int wait_status);
// Makes a fresh private directory under $TMPDIR (or /tmp, also when $TMPDIR is longer
// than 48 bytes, so that Unix socket paths inside fit) named raio-<prefix>-XXXXXX,
// mode 0700. Returns "" on failure.
std::string MakeTempDir(const std::string& prefix);
// Removes a directory tree; errors are ignored.
void RemoveTree(const std::string& path);
// Base directory MakeTempDir uses.
std::string TempBase();

// A process as recorded in a file or file name for later liveness checks: its pid and
// its start time, field 22 of /proc/<pid>/stat (clock ticks after boot). The pair
// tells a process from a later one that reuses its pid.
struct ProcessStamp {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
};
// This process's stamp; nullopt when /proc/self/stat cannot be read.
std::optional<ProcessStamp> SelfProcessStamp();
// Process `pid`'s stamp; nullopt when there is no such process or its stat is unreadable.
std::optional<ProcessStamp> ProcessStampOf(pid_t pid);
// The inode number of this process's pid namespace (/proc/self/ns/pid); 0 when unknown.
// Pids recorded by a process in another namespace say nothing about processes here.
uint64_t SelfPidNamespace();

enum class ProcessLiveness {
  kAlive,    // the process runs (and, when a start time was given, is the same process)
  kGone,     // no such pid, a zombie, or the pid now belongs to a later process
  kUnknown,  // the pid exists but /proc cannot confirm which process it is: treat as alive
};
// Whether process `pid` still runs. With `start_ticks`, a process with that pid but a
// different start time counts as gone (the pid was reused). Reads /proc (without it,
// falls back to kill(pid, 0)); does not block.
ProcessLiveness CheckProcess(pid_t pid, std::optional<uint64_t> start_ticks = std::nullopt);

// What a sweep of a dead process's leftovers removed.
struct Reclaimed {
  int files = 0;       // session directories
  uint64_t bytes = 0;  // their allocated size (st_blocks), i.e. disk given back
};
// Writes `dir`/pid: "<pid> <start ticks> <pid namespace>\n" of this process, so that
// CleanStaleSessions can tell when the session's owner is gone. False when the file cannot be
// written.
bool WriteSessionOwner(const std::string& dir);
// Removes raio-session-* directories under TempBase() owned by this user whose owning
// process (the "pid" file; a pid alone, as older versions wrote it, is checked without
// a start time; one from another pid namespace is skipped) is gone: what a SIGKILLed
// driver or daemon leaves behind (spill files, sockets). Directories without a readable
// pid file, of other users, or of live (or unknown) processes are left alone. Logs each
// removal. (The object store's shared memory needs no sweep: it has no file name.)
Reclaimed CleanStaleSessions();

}  // namespace raio
