// Remote functions shared by the integration test programs. Every test binary is also
// its own worker executable, so these are registered (RAIO_REMOTE) in test_functions.cc.
#pragma once

#include <raio/raio.h>

#include <string>
#include <vector>

namespace raio_test {

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  RAIO_SERIALIZE(x, y, label);
};

int Add(int a, int b);
int Square(int x);
int SumVector(std::vector<int> values);
Point Scale(Point p, double factor);
void NoOp();
int Overloaded(int x);
std::string Overloaded(std::string s);
// Sleeps `ms` milliseconds; returns {start_us, end_us} since the epoch (steady clock is
// per-process, so the system clock is used to compare across workers).
std::vector<int64_t> SleepAndStamp(int ms);
int Pid();
std::string VisibleDevices();
// "<pid>:<CUDA_VISIBLE_DEVICES>" of the worker that runs it, after sleeping `ms`.
std::string PidAndDevices(int ms);
int ThrowsRuntimeError(int x);
int ThrowsCustom(int x);
// Ends its own worker process abruptly.
int Crash(int x);
// Crashes on the first attempt (marker file absent), succeeds afterwards.
int CrashOnce(std::string marker_path);
// Submits `n` Square tasks from inside a task and sums them (nested tasks).
int NestedSum(int n);
// Nested `depth` levels deep, each level waiting on the next.
int Recurse(int depth);
int SleepMs(int ms);
// Sleeps `ms`, then returns the hex id of the node it ran on (raio::GetNodeId()).
std::string NodeIdAfterMs(int ms);
// A rendezvous of `parties` tasks in directory `dir` (the test's, on this machine): adds an
// entry, then waits until `parties` entries exist or `timeout_ms` passes. Returns the number
// of entries it saw: `parties` when that many tasks ran at the same time.
int MeetIn(std::string dir, int parties, int timeout_ms);
// MeetIn, then the hex id of the node it ran on.
std::string NodeIdAfterMeeting(std::string dir, int parties, int timeout_ms);
// MeetIn, then "<pid>:<CUDA_VISIBLE_DEVICES>" of the worker that runs it: tasks that must
// hold their devices at the same time.
std::string PidAndDevicesAfterMeeting(std::string dir, int parties, int timeout_ms);
// A task held until the test lets it go: adds an entry "<pid>-<n>" to `started_dir` (the
// test's, on this machine: it sees the task running, in which process), then waits until
// `release_path` exists and returns `value`. Throws std::runtime_error when `timeout_ms`
// passes first (a test that never released it fails instead of hanging).
int HoldUntilReleased(std::string started_dir, std::string release_path, int value, int timeout_ms);

// The test's side of MeetIn and HoldUntilReleased (called in the test, not remote).
// A fresh empty directory under the temp directory, named after `tag` and this process.
std::string FreshTestDir(const std::string& tag);
// The number of entries in `dir` (0 when it does not exist).
int CountEntries(const std::string& dir);
// The pids in the names of the "<pid>-<n>" entries in `dir`.
std::vector<int> EntryPids(const std::string& dir);
// Creates the file `path` (a release for HoldUntilReleased).
void Touch(const std::string& path);

}  // namespace raio_test

namespace raio_test {
// Object store helpers: deterministic byte/array generators and checksums (FNV-1a).
std::vector<uint8_t> MakeBytes(int64_t n, int seed);
uint64_t Checksum(std::vector<uint8_t> bytes);
uint64_t ChecksumBytes(const uint8_t* data, std::size_t size);
std::vector<double> MakeArray(int64_t n, double scale);
double SumArray(std::vector<double> values);
int64_t CountElements(std::vector<std::vector<double>> lists);
// Returns a view-based checksum computed in the worker from a Buffer argument.
uint64_t ChecksumBuffer(raio::Buffer buffer);
}  // namespace raio_test

namespace raio_test {
using BytesRef = raio::ObjectRef<std::vector<uint8_t>>;
// Puts `n` objects of `size` bytes inside the worker (which owns them) and returns refs.
std::vector<BytesRef> MakeRefs(int n, int64_t size);
// Gets every ref (borrowed from their owner) and combines their checksums.
uint64_t ChecksumAll(std::vector<BytesRef> refs);
// Returns the ref it was given (not its value).
BytesRef EchoRef(BytesRef ref);
// Puts a small int in the worker and returns its ref (a small object owned by a worker).
raio::ObjectRef<int> MakeSmallRef(int value);
}  // namespace raio_test

namespace raio_test {
// Borrows `ref` (an ObjectRef parameter), writes its pid to `pid_file`, then sleeps `ms`.
int HoldRef(BytesRef ref, std::string pid_file, int ms);
}  // namespace raio_test

namespace raio_test {
// A small actor class for tests across processes.
class Accumulator {
 public:
  static Accumulator* Create(int start);
  int Add(int x);
  int Total() const;

 private:
  explicit Accumulator(int start) : total_(start) {}
  int total_;
};
}  // namespace raio_test

namespace raio_test {
// An actor that reports what its process sees: CUDA_VISIBLE_DEVICES ("<unset>" when
// unset) and its pid.
class DeviceProbe {
 public:
  static DeviceProbe* Create();
  std::string Visible();
  int Pid();
};
}  // namespace raio_test

namespace raio_test {
// A ref to a small object owned by the worker that ran the task, and that worker's pid.
struct OwnedRef {
  raio::ObjectRef<int> ref;
  int pid = 0;
  RAIO_SERIALIZE(ref, pid);
};
OwnedRef MakeOwnedRef(int value);
}  // namespace raio_test

namespace raio_test {
// Config entry `name` as the process that runs the task sees it (raio::SystemConfig), or
// "<none>" for an unknown name.
std::string ConfigValue(std::string name);
// The same, as seen by a task that this task submits (nested, in another worker).
std::string NestedConfigValue(std::string name);
// An actor that reports config entries as its process sees them.
class ConfigProbe {
 public:
  static ConfigProbe* Create();
  std::string Value(std::string name);
};
}  // namespace raio_test

namespace raio_test {
// An actor that counts from `start` and says which node it runs on.
class Tally {
 public:
  static Tally* Create(int start);
  int Add(int by);
  std::string Node();

 private:
  explicit Tally(int start) : value_(start) {}
  int value_;
};
}  // namespace raio_test

namespace raio_test {
// MeetIn(dir, parties, timeout_ms), then the hex id of the node it ran on; throws
// std::runtime_error (saying how many it met) when fewer than `parties` tasks ran at once
// within `timeout_ms`, so that a caller learns the overlap it needs did not happen.
std::string NodeIdOnceAllMet(std::string dir, int parties, int timeout_ms);
// A gate: adds an entry "<pid>-<n>" to directory `dir` (this task has started, in process
// <pid>), then waits until the file `dir`/go exists; returns the hex id of its node. Throws
// std::runtime_error when `timeout_ms` passes first.
std::string NodeIdOnceGo(std::string dir, int timeout_ms);
}  // namespace raio_test
