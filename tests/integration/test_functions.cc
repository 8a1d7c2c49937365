#include "test_functions.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <thread>

namespace raio_test {

struct CustomError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int Add(int a, int b) { return a + b; }
int Square(int x) { return x * x; }
int SumVector(std::vector<int> values) { return std::accumulate(values.begin(), values.end(), 0); }
Point Scale(Point p, double factor) { return Point{p.x * factor, p.y * factor, p.label + "*"}; }
void NoOp() {}
int Overloaded(int x) { return x + 1; }
std::string Overloaded(std::string s) { return s + "!"; }

std::vector<int64_t> SleepAndStamp(int ms) {
  auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  int64_t start = now_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {start, now_us()};
}

int Pid() { return static_cast<int>(getpid()); }

std::string VisibleDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string(v) : std::string("<unset>");
}

std::string PidAndDevices(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return std::to_string(getpid()) + ":" + VisibleDevices();
}

int ThrowsRuntimeError(int x) { throw std::runtime_error("bad input " + std::to_string(x)); }
int ThrowsCustom(int x) { throw CustomError("custom " + std::to_string(x)); }

int Crash(int) {
  ::kill(::getpid(), SIGKILL);
  return 0;
}

int CrashOnce(std::string marker_path) {
  if (::access(marker_path.c_str(), F_OK) != 0) {
    std::ofstream(marker_path) << "crashed once\n";
    ::kill(::getpid(), SIGKILL);
  }
  return 7;
}

int NestedSum(int n) {
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 1; i <= n; ++i) refs.push_back(raio::Task(Square).Remote(i));
  return raio::Task(SumVector).Remote(refs).Get();
}

int Recurse(int depth) {
  if (depth == 0) return 0;
  return 1 + raio::Task(Recurse).Remote(depth - 1).Get();
}

int SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

std::string NodeIdAfterMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return raio::GetNodeId();
}

int MeetIn(std::string dir, int parties, int timeout_ms) {
  namespace fs = std::filesystem;
  std::string me = std::to_string(getpid()) + "-" +
                   std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::ofstream(fs::path(dir) / me).put('x');
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int seen = 0;
  while (true) {
    seen = static_cast<int>(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}));
    if (seen >= parties || std::chrono::steady_clock::now() >= deadline) return seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string NodeIdAfterMeeting(std::string dir, int parties, int timeout_ms) {
  MeetIn(std::move(dir), parties, timeout_ms);
  return raio::GetNodeId();
}

std::string PidAndDevicesAfterMeeting(std::string dir, int parties, int timeout_ms) {
  MeetIn(std::move(dir), parties, timeout_ms);
  return PidAndDevices(0);
}

namespace {
// "<pid>-<steady clock ticks>": unique per call, and names the process.
std::string EntryName() {
  return std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}
}  // namespace

int HoldUntilReleased(std::string started_dir, std::string release_path, int value,
                      int timeout_ms) {
  namespace fs = std::filesystem;
  std::ofstream(fs::path(started_dir) / EntryName()).put('x');
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!fs::exists(release_path)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("HoldUntilReleased: " + release_path + " did not appear within " +
                               std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return value;
}

std::string FreshTestDir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("raio-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

int CountEntries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

std::vector<int> EntryPids(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<int> pids;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    pids.push_back(std::atoi(it->path().filename().string().c_str()));
  }
  return pids;
}

void Touch(const std::string& path) { std::ofstream(path).put('x'); }

}  // namespace raio_test

using namespace raio_test;
RAIO_REMOTE(Add, Square, SumVector, Scale, NoOp, RAIO_FUNC(Overloaded, int),
            RAIO_FUNC(Overloaded, std::string), SleepAndStamp, Pid, VisibleDevices, PidAndDevices,
            ThrowsRuntimeError, ThrowsCustom, Crash, CrashOnce, NestedSum, Recurse, SleepMs,
            NodeIdAfterMs, MeetIn, NodeIdAfterMeeting);
RAIO_REMOTE(raio_test::PidAndDevicesAfterMeeting, raio_test::HoldUntilReleased);

namespace raio_test {

uint64_t ChecksumBytes(const uint8_t* data, std::size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

std::vector<uint8_t> MakeBytes(int64_t n, int seed) {
  std::vector<uint8_t> out(static_cast<std::size_t>(n));
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

uint64_t Checksum(std::vector<uint8_t> bytes) { return ChecksumBytes(bytes.data(), bytes.size()); }

std::vector<double> MakeArray(int64_t n, double scale) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = scale * static_cast<double>(i);
  return out;
}

double SumArray(std::vector<double> values) {
  double s = 0;
  for (double v : values) s += v;
  return s;
}

int64_t CountElements(std::vector<std::vector<double>> lists) {
  int64_t n = 0;
  for (const auto& l : lists) n += static_cast<int64_t>(l.size());
  return n;
}

uint64_t ChecksumBuffer(raio::Buffer buffer) { return ChecksumBytes(buffer.data(), buffer.size()); }

}  // namespace raio_test

RAIO_REMOTE(raio_test::MakeBytes, raio_test::Checksum, raio_test::MakeArray, raio_test::SumArray,
            raio_test::CountElements, raio_test::ChecksumBuffer);

namespace raio_test {

std::vector<BytesRef> MakeRefs(int n, int64_t size) {
  std::vector<BytesRef> refs;
  for (int i = 0; i < n; ++i) refs.push_back(raio::Put(MakeBytes(size, 100 + i)));
  return refs;
}

uint64_t ChecksumAll(std::vector<BytesRef> refs) {
  uint64_t h = 0;
  for (const auto& r : refs) h = h * 31 + Checksum(r.Get());
  return h;
}

BytesRef EchoRef(BytesRef ref) { return ref; }

raio::ObjectRef<int> MakeSmallRef(int value) { return raio::Put(value); }

}  // namespace raio_test

RAIO_REMOTE(raio_test::MakeRefs, raio_test::ChecksumAll, raio_test::EchoRef,
            raio_test::MakeSmallRef);

namespace raio_test {
int HoldRef(BytesRef ref, std::string pid_file, int ms) {
  auto view = ref.GetView();
  {
    std::ofstream out(pid_file + ".tmp");
    out << getpid() << "\n";
  }
  std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int>(view.size());
}
}  // namespace raio_test
RAIO_REMOTE(raio_test::HoldRef);

namespace raio_test {
Accumulator* Accumulator::Create(int start) { return new Accumulator(start); }
int Accumulator::Add(int x) { return total_ += x; }
int Accumulator::Total() const { return total_; }
}  // namespace raio_test
RAIO_REMOTE(raio_test::Accumulator::Create, &raio_test::Accumulator::Add,
            &raio_test::Accumulator::Total);

namespace raio_test {
DeviceProbe* DeviceProbe::Create() { return new DeviceProbe(); }
std::string DeviceProbe::Visible() { return VisibleDevices(); }
int DeviceProbe::Pid() { return static_cast<int>(getpid()); }
}  // namespace raio_test
RAIO_REMOTE(raio_test::DeviceProbe::Create, &raio_test::DeviceProbe::Visible,
            &raio_test::DeviceProbe::Pid);

namespace raio_test {
OwnedRef MakeOwnedRef(int value) { return OwnedRef{raio::Put(value), static_cast<int>(getpid())}; }
}  // namespace raio_test
RAIO_REMOTE(raio_test::MakeOwnedRef);

namespace raio_test {

std::string ConfigValue(std::string name) {
  std::map<std::string, std::string> values = raio::SystemConfig();
  auto it = values.find(name);
  return it == values.end() ? "<none>" : it->second;
}

std::string NestedConfigValue(std::string name) {
  return raio::Task(ConfigValue).Remote(name).Get();
}

ConfigProbe* ConfigProbe::Create() { return new ConfigProbe(); }
std::string ConfigProbe::Value(std::string name) { return ConfigValue(std::move(name)); }

}  // namespace raio_test

RAIO_REMOTE(raio_test::ConfigValue, raio_test::NestedConfigValue, raio_test::ConfigProbe::Create,
            &raio_test::ConfigProbe::Value);

namespace raio_test {
Tally* Tally::Create(int start) { return new Tally(start); }
int Tally::Add(int by) { return value_ += by; }
std::string Tally::Node() { return raio::GetNodeId(); }
}  // namespace raio_test

RAIO_REMOTE(raio_test::Tally::Create, &raio_test::Tally::Add, &raio_test::Tally::Node);

namespace raio_test {

std::string NodeIdOnceAllMet(std::string dir, int parties, int timeout_ms) {
  const int seen = MeetIn(dir, parties, timeout_ms);
  if (seen < parties) {
    throw std::runtime_error("met " + std::to_string(seen) + " of " + std::to_string(parties) +
                             " tasks in " + dir + " within " + std::to_string(timeout_ms) + " ms");
  }
  return raio::GetNodeId();
}

std::string NodeIdOnceGo(std::string dir, int timeout_ms) {
  namespace fs = std::filesystem;
  const std::string me =
      std::to_string(getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::ofstream(fs::path(dir) / me).put('x');
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!fs::exists(fs::path(dir) / "go")) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("no " + (fs::path(dir) / "go").string() + " within " +
                               std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return raio::GetNodeId();
}

}  // namespace raio_test

RAIO_REMOTE(raio_test::NodeIdOnceAllMet, raio_test::NodeIdOnceGo);
