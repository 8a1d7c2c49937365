// raio_bench: microbenchmarks of the task and object paths on the embedded cluster (or on
// RAIO_ADDRESS when it is set).
//
//   build-release/bench/raio_bench [--quick] [--no-json] [--json=PATH] [--startup-runs=N]
//                                  [--no-million]
//
// Measures
//   - sync no-op tasks: submit one, Get it, repeat (median / p99 round trip, tasks/s);
//   - async no-op tasks: submit 10,000, then Get all, a few rounds (best / median tasks/s);
//   - small Put then Get of an int (calls/s, median latency);
//   - actors (each its own worker process; killed after each benchmark): 1:1 sync no-op
//     calls (median / p99, calls/s); 1:1 async, 10,000 calls then Get all (best / median
//     calls/s), the same on an actor with SetMaxConcurrency(4), and 1:4 (the driver calls
//     4 actors round-robin); n:n, 2 caller actors each making 5,000 calls to their own
//     target from inside a method. Each target's call count is checked afterwards;
//   - large objects (1 MiB, 100 MiB, 1 GiB std::vector<uint8_t>): Put and typed Get
//     throughput (GB/s), GetView latency (zero copy); a task on a worker that takes a
//     1 GiB / 100 MiB vector argument (read from shared memory, copied once into the
//     parameter) and one taking a 1 GiB raio::Buffer (zero copy): round trips;
//   - multi-client: 4 tasks, each submitting 2,500 no-op tasks from a worker and Getting
//     them, concurrently (tasks/s); batches of 1,000 no-op tasks then Get, 20 times (tasks/s,
//     median batch ms); a user's loop: 20,000 Echo(i) tasks, each result summed with Get,
//     refs freed, all timed (tasks/s); raio::Wait on 1,000 refs (right after submitting, then on
//     ready refs for all and for 1 of them, us);
//   - 1,000,000 queued no-op tasks (--no-million skips it; --quick: 100,000): submit all,
//     Get all (s, tasks/s), the driver's peak RSS (VmHWM; in the embedded cluster the driver
//     process also hosts the node daemon and head; target < 2 GiB) and the largest worker's;
//   - embedded cluster start to first result, and Shutdown time: this binary re-runs
//     itself with RAIO_BENCH_STARTUP=1 (Init + one task + Get + Shutdown) several times.
// Prints a table with targets and writes the same figures as JSON to
// bench/results/<UTC timestamp>.json in the source tree (git-ignored).
//
// The cluster runs tasks by re-executing this binary as its workers, so raio::Init is the
// first call in main (in a worker it never returns). Timing is plain std::chrono; a
// watchdog ends the run with a clear message if a phase hangs.
#include <raio/raio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

void Noop() {}

// Used by the sanity check only: results must come back right, from worker processes.
int Echo(int x) { return x; }
long WorkerPid() { return static_cast<long>(::getpid()); }

// Object store benchmarks: the worker touches the argument (size, first and last byte).
// By value: the argument is read in place from shared memory, then copied once into `v`.
std::vector<uint64_t> TouchVector(std::vector<uint8_t> v) {
  if (v.empty()) return {0, 0, 0};
  return {v.size(), v.front(), v.back()};
}
// raio::Buffer: a view of the object in shared memory, nothing copied.
std::vector<uint64_t> TouchBuffer(raio::Buffer b) {
  if (b.size() == 0) return {0, 0, 0};
  return {b.size(), b.data()[0], b.data()[b.size() - 1]};
}

// Multi-client benchmark: a task (a "client" on a worker) that submits `count` no-op tasks
// and Gets them all; returns how many completed. While it blocks in Get it lends its CPU
// back, so 4 of them run on 2 CPUs.
long SubmitMany(int count) {
  std::vector<raio::ObjectRef<void>> refs;
  refs.reserve(count);
  for (int i = 0; i < count; ++i) refs.push_back(raio::Task(Noop).Remote());
  for (const auto& r : refs) r.Get();
  return static_cast<long>(refs.size());
}

RAIO_REMOTE(Noop, Echo, WorkerPid, TouchVector, TouchBuffer, SubmitMany);

// Actor benchmarks. The target's Noop only bumps a counter (atomic: it also serves under
// SetMaxConcurrency), so that Calls() proves every call ran exactly once.
class BenchTarget {
 public:
  static BenchTarget* Create() { return new BenchTarget(); }
  void Noop() { calls_.fetch_add(1, std::memory_order_relaxed); }
  long Calls() const { return calls_.load(); }
  long Pid() const { return static_cast<long>(::getpid()); }

 private:
  BenchTarget() = default;
  std::atomic<long> calls_{0};
};

// n:n: a caller actor makes `count` async calls to its own target from inside a method,
// then Gets them all; returns the number of calls it completed.
class BenchCaller {
 public:
  static BenchCaller* Create() { return new BenchCaller(); }
  long CallMany(raio::ActorHandle<BenchTarget> target, int count) {
    std::vector<raio::ObjectRef<void>> refs;
    refs.reserve(count);
    for (int i = 0; i < count; ++i) refs.push_back(target.Task(&BenchTarget::Noop).Remote());
    for (const auto& r : refs) r.Get();
    return static_cast<long>(refs.size());
  }

 private:
  BenchCaller() = default;
};

RAIO_REMOTE(BenchTarget::Create, &BenchTarget::Noop, &BenchTarget::Calls, &BenchTarget::Pid,
            BenchCaller::Create, &BenchCaller::CallMany);

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kStartupEnv[] = "RAIO_BENCH_STARTUP";
constexpr char kStartupLinePrefix[] = "RAIO_BENCH_STARTUP_RESULT";

// Size of the embedded cluster's object store for the main run: room for a 1 GiB object
// plus its warm-up and a 1 GiB Buffer with slack (the startup children keep the default).
constexpr uint64_t kObjectStoreBytes = 3ull << 30;

double MicrosSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  // Nearest-rank percentile.
  std::size_t rank = static_cast<std::size_t>(std::ceil(p / 100.0 * v.size()));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

double Median(const std::vector<double>& v) { return Percentile(v, 50); }

// ---------------------------------------------------------------------------------------
// Startup child: Init + one task + Get + Shutdown, printed as one line for the parent.

int RunStartupChild(Clock::time_point t0) {
  raio::Task(Noop).Remote().Get();
  Clock::time_point t_first = Clock::now();
  raio::Shutdown();
  Clock::time_point t_down = Clock::now();
  std::printf("%s start_to_first_result_ms=%.3f shutdown_ms=%.3f\n", kStartupLinePrefix,
              MicrosSince(t0, t_first) / 1000.0, MicrosSince(t_first, t_down) / 1000.0);
  std::fflush(stdout);
  return 0;
}

// ---------------------------------------------------------------------------------------
// Options and the watchdog.

struct Options {
  bool quick = false;
  bool write_json = true;
  std::string json_path;  // empty: bench/results/<timestamp>.json
  int startup_runs = 5;
  bool million = true;  // the 1,000,000 queued tasks row
};

void PrintUsage(const char* argv0) {
  std::printf(
      "usage: %s [--quick] [--no-json] [--json=PATH] [--startup-runs=N] [--no-million]\n"
      "  --quick           shorter run (fewer samples and rounds), a few seconds\n"
      "  --no-json         do not write bench/results/<timestamp>.json\n"
      "  --json=PATH       write the JSON to PATH instead (used by `make bench-peers`)\n"
      "  --startup-runs=N  child processes for start-to-first-result (default 5, quick 3)\n"
      "  --no-million      skip the 1,000,000 queued tasks benchmark (quick: 100,000)\n",
      argv0);
}

std::optional<Options> ParseOptions(int argc, char** argv) {
  Options o;
  bool runs_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--no-json") {
      o.write_json = false;
    } else if (a.rfind("--json=", 0) == 0) {
      o.write_json = true;
      o.json_path = a.substr(std::strlen("--json="));
    } else if (a.rfind("--startup-runs=", 0) == 0) {
      o.startup_runs = std::max(1, std::atoi(a.c_str() + std::strlen("--startup-runs=")));
      runs_set = true;
    } else if (a == "--no-million") {
      o.million = false;
    } else if (a == "--help" || a == "-h") {
      PrintUsage(argv[0]);
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown flag: %s\n", a.c_str());
      PrintUsage(argv[0]);
      return std::nullopt;
    }
  }
  if (o.quick && !runs_set) o.startup_runs = 3;
  return o;
}

// Ends the process if one phase runs past its deadline (a hang in the runtime), naming
// the phase, so that `make bench` never blocks forever.
class Watchdog {
 public:
  Watchdog() : thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Enter(const std::string& phase, std::chrono::seconds limit) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
    deadline_ = Clock::now() + limit;
    cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (deadline_ && Clock::now() >= *deadline_) {
        std::fprintf(stderr, "\nraio_bench: phase '%s' did not finish in time (hang?); exiting\n",
                     phase_.c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string phase_;
  std::optional<Clock::time_point> deadline_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------
// Results.

struct Row {
  std::string benchmark;
  double value = 0;
  std::string unit;
  // "<= 50", ">= 100000", or empty for no target.
  std::string target_text;
  std::optional<bool> pass;  // nullopt: no target
  nlohmann::json detail = nlohmann::json::object();
};

Row Make(std::string name, double value, std::string unit) {
  Row r;
  r.benchmark = std::move(name);
  r.value = value;
  r.unit = std::move(unit);
  return r;
}

Row AtMost(Row r, double target) {
  std::ostringstream s;
  s << "<= " << target;
  r.target_text = s.str();
  r.pass = std::isfinite(r.value) && r.value <= target;
  return r;
}

Row AtLeast(Row r, double target) {
  std::ostringstream s;
  s << ">= " << target;
  r.target_text = s.str();
  r.pass = std::isfinite(r.value) && r.value >= target;
  return r;
}

std::string FormatValue(double v) {
  if (!std::isfinite(v)) return "n/a";
  std::ostringstream s;
  if (v >= 1000) {
    s << std::fixed << std::setprecision(0) << v;
  } else if (v >= 10) {
    s << std::fixed << std::setprecision(1) << v;
  } else {
    s << std::fixed << std::setprecision(2) << v;
  }
  return s.str();
}

void PrintTable(const std::vector<Row>& rows) {
  std::size_t w0 = std::strlen("benchmark");
  for (const auto& r : rows) w0 = std::max(w0, r.benchmark.size());
  auto line = [&](const std::string& a, const std::string& b, const std::string& c,
                  const std::string& d, const std::string& e) {
    std::printf("%-*s  %12s  %-8s  %-12s  %s\n", static_cast<int>(w0), a.c_str(), b.c_str(),
                c.c_str(), d.c_str(), e.c_str());
  };
  std::printf("\n");
  line("benchmark", "result", "unit", "target", "flag");
  line(std::string(w0, '-'), std::string(12, '-'), std::string(8, '-'), std::string(12, '-'),
       "----");
  for (const auto& r : rows) {
    line(r.benchmark, FormatValue(r.value), r.unit, r.target_text.empty() ? "-" : r.target_text,
         !r.pass ? "-" : (*r.pass ? "pass" : "MISS"));
  }
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------
// Benchmarks. Each takes the driver to be initialized.

// Not a benchmark: checks that tasks really run in worker processes and return the right
// values, so that a fast but broken path cannot pass. Throws on a wrong result.
std::vector<Row> SanityCheck(const Options& /*opt*/, Watchdog& wd) {
  wd.Enter("sanity check", std::chrono::seconds(60));
  constexpr int kN = 2000;
  std::vector<raio::ObjectRef<int>> refs;
  refs.reserve(kN);
  for (int i = 0; i < kN; ++i) refs.push_back(raio::Task(Echo).Remote(i));
  std::vector<int> values = raio::Get(refs);
  for (int i = 0; i < kN; ++i) {
    if (values[i] != i) {
      throw std::runtime_error("Echo(" + std::to_string(i) + ") returned " +
                               std::to_string(values[i]));
    }
  }
  const long pid = raio::Task(WorkerPid).Remote().Get();
  if (pid == static_cast<long>(::getpid())) {
    throw std::runtime_error("a task ran in the driver process, not in a worker");
  }
  return {};
}

std::vector<Row> BenchSync(const Options& opt, Watchdog& wd) {
  const int warmup = opt.quick ? 200 : 1000;
  const int max_samples = opt.quick ? 5000 : 100000;
  const auto budget = opt.quick ? std::chrono::seconds(1) : std::chrono::seconds(5);

  wd.Enter("sync warm-up", std::chrono::seconds(60));
  for (int i = 0; i < warmup; ++i) raio::Task(Noop).Remote().Get();

  wd.Enter("sync no-op round trips", std::chrono::seconds(60));
  std::vector<double> us;
  us.reserve(max_samples);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + budget;
  Clock::time_point last = start;
  while (static_cast<int>(us.size()) < max_samples && last < stop) {
    Clock::time_point t0 = Clock::now();
    raio::Task(Noop).Remote().Get();
    last = Clock::now();
    us.push_back(MicrosSince(t0, last));
  }
  const double total_s = MicrosSince(start, last) / 1e6;
  const double rate = us.size() / total_s;
  nlohmann::json d = {{"samples", us.size()},          {"warmup", warmup},
                      {"min_us", Percentile(us, 0)},   {"p90_us", Percentile(us, 90)},
                      {"max_us", Percentile(us, 100)}, {"total_s", total_s}};
  Row med = AtMost(Make("sync no-op round trip (median)", Median(us), "us"), 50);
  med.detail = d;
  Row p99 = Make("sync no-op round trip (p99)", Percentile(us, 99), "us");
  p99.detail = d;
  Row tput = Make("sync no-op throughput", rate, "tasks/s");
  tput.detail = d;
  return {med, p99, tput};
}

std::vector<Row> BenchAsync(const Options& opt, Watchdog& wd) {
  constexpr int kBatch = 10000;
  const int rounds = opt.quick ? 3 : 10;
  // Stop early (after at least one round) when the runtime is slow, to bound run time.
  const auto budget = opt.quick ? std::chrono::seconds(8) : std::chrono::seconds(25);

  // Warm-up: a small batch, so that workers are up.
  wd.Enter("async warm-up", std::chrono::seconds(60));
  {
    std::vector<raio::ObjectRef<void>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(raio::Task(Noop).Remote());
    for (const auto& r : refs) r.Get();
  }

  std::vector<double> rates;
  std::vector<double> submit_rates;
  const Clock::time_point begin = Clock::now();
  for (int round = 0; round < rounds; ++round) {
    if (round > 0 && Clock::now() - begin > budget) break;
    wd.Enter("async round " + std::to_string(round + 1) + " (10,000 tasks)",
             std::chrono::seconds(90));
    std::vector<raio::ObjectRef<void>> refs;
    refs.reserve(kBatch);
    Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) refs.push_back(raio::Task(Noop).Remote());
    Clock::time_point t_submitted = Clock::now();
    for (const auto& r : refs) r.Get();
    Clock::time_point t1 = Clock::now();
    rates.push_back(kBatch / (MicrosSince(t0, t1) / 1e6));
    submit_rates.push_back(kBatch / (MicrosSince(t0, t_submitted) / 1e6));
    // Freeing 10,000 refs is part of the runtime's work too, but not of this figure.
    wd.Enter("async round " + std::to_string(round + 1) + " release refs",
             std::chrono::seconds(60));
    refs.clear();
  }
  nlohmann::json d = {{"batch", kBatch},
                      {"rounds", rates.size()},
                      {"tasks_per_s_each_round", rates},
                      {"submit_only_tasks_per_s_each_round", submit_rates}};
  Row best = AtLeast(Make("async no-op, 10k batch (best)",
                          *std::max_element(rates.begin(), rates.end()), "tasks/s"),
                     100000);
  best.detail = d;
  Row med = AtLeast(Make("async no-op, 10k batch (median)", Median(rates), "tasks/s"), 100000);
  med.detail = d;
  return {best, med};
}

// Multi-client: 4 tasks, each a client submitting kPerClient no-op tasks from inside a
// worker and Getting them, run concurrently. Rate: all nested tasks over the wall time from
// the driver's submit of the 4 clients to their last result.
std::vector<Row> BenchMultiClient(const Options& opt, Watchdog& wd) {
  constexpr int kClients = 4;
  const int per_client = 2500;
  const int rounds = opt.quick ? 2 : 5;

  wd.Enter("multi-client warm-up", std::chrono::seconds(60));
  {
    std::vector<raio::ObjectRef<long>> refs;
    for (int c = 0; c < kClients; ++c) refs.push_back(raio::Task(SubmitMany).Remote(100));
    for (const auto& r : refs) {
      if (r.Get() != 100) throw std::runtime_error("SubmitMany(100) returned a wrong count");
    }
  }
  std::vector<double> rates;
  for (int round = 0; round < rounds; ++round) {
    wd.Enter("multi-client round " + std::to_string(round + 1), std::chrono::seconds(90));
    std::vector<raio::ObjectRef<long>> refs;
    Clock::time_point t0 = Clock::now();
    for (int c = 0; c < kClients; ++c) refs.push_back(raio::Task(SubmitMany).Remote(per_client));
    long total = 0;
    for (const auto& r : refs) {
      long got = r.Get();
      if (got != per_client) {
        throw std::runtime_error("SubmitMany(" + std::to_string(per_client) + ") returned " +
                                 std::to_string(got));
      }
      total += got;
    }
    Clock::time_point t1 = Clock::now();
    rates.push_back(total / (MicrosSince(t0, t1) / 1e6));
  }
  nlohmann::json d = {{"clients", kClients},
                      {"tasks_per_client", per_client},
                      {"rounds", rates.size()},
                      {"tasks_per_s_each_round", rates},
                      {"note",
                       "each client is a task on a worker submitting and Getting its "
                       "no-op tasks; wall time from the driver's submit of the clients"}};
  Row best = Make("multi-client async, 4 clients x 2.5k tasks (best)",
                  *std::max_element(rates.begin(), rates.end()), "tasks/s");
  best.detail = d;
  Row med = Make("multi-client async, 4 clients x 2.5k tasks (median)", Median(rates), "tasks/s");
  med.detail = d;
  return {best, med};
}

// Batches: submit 1,000 no-op tasks, Get them all, repeat.
std::vector<Row> BenchBatches(const Options& opt, Watchdog& wd) {
  constexpr int kBatch = 1000;
  const int batches = opt.quick ? 5 : 20;
  wd.Enter("batches of 1,000", std::chrono::seconds(90));
  std::vector<double> ms;
  const Clock::time_point start = Clock::now();
  for (int b = 0; b < batches; ++b) {
    std::vector<raio::ObjectRef<void>> refs;
    refs.reserve(kBatch);
    Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) refs.push_back(raio::Task(Noop).Remote());
    for (const auto& r : refs) r.Get();
    ms.push_back(MicrosSince(t0, Clock::now()) / 1000.0);
  }
  const double total_s = MicrosSince(start, Clock::now()) / 1e6;
  nlohmann::json d = {
      {"batch", kBatch},     {"batches", batches},
      {"batch_ms_each", ms}, {"p90_ms", Percentile(ms, 90)},
      {"total_s", total_s},  {"note", "total includes releasing each batch's refs"}};
  Row rate = Make("batches of 1k tasks then Get (x" + std::to_string(batches) + ")",
                  batches * kBatch / total_s, "tasks/s");
  rate.detail = d;
  Row lat = Make("batch of 1k tasks then Get (median)", Median(ms), "ms");
  lat.detail = d;
  return {rate, lat};
}

// A loop as a user writes it: 20,000 tasks with an int argument and an int result, each
// result read with Get and summed, then the refs dropped; the time includes freeing them.
// The sum is checked (a wrong result fails the benchmark).
std::vector<Row> BenchUserLoop(const Options& opt, Watchdog& wd) {
  constexpr int kTasks = 20000;
  const int rounds = opt.quick ? 1 : 3;
  std::vector<double> rates;
  for (int round = 0; round < rounds; ++round) {
    wd.Enter("user loop round " + std::to_string(round + 1), std::chrono::seconds(90));
    Clock::time_point t0 = Clock::now();
    long long sum = 0;
    {
      std::vector<raio::ObjectRef<int>> refs;
      for (int i = 0; i < kTasks; ++i) refs.push_back(raio::Task(Echo).Remote(i));
      for (const auto& r : refs) sum += r.Get();
    }
    rates.push_back(kTasks / (MicrosSince(t0, Clock::now()) / 1e6));
    const long long want = static_cast<long long>(kTasks) * (kTasks - 1) / 2;
    if (sum != want) {
      throw std::runtime_error("user loop: sum " + std::to_string(sum) + ", expected " +
                               std::to_string(want));
    }
  }
  Row med = Make("user loop: 20k Echo(i) tasks, Get each, free (median)", Median(rates), "tasks/s");
  med.detail = {{"tasks", kTasks},
                {"rounds", rates.size()},
                {"tasks_per_s_each_round", rates},
                {"note", "no reserve, results summed and checked, refs freed inside the timing"}};
  return {med};
}

// Wait on 1,000 refs: first right after submitting 1,000 no-op tasks (includes running
// them), then repeatedly on the same, ready refs for all 1,000 and for 1 of 1,000.
std::vector<Row> BenchWait(const Options& opt, Watchdog& wd) {
  constexpr int kN = 1000;
  const int reps = opt.quick ? 50 : 300;
  wd.Enter("wait on 1,000 refs", std::chrono::seconds(60));
  std::vector<raio::ObjectRef<void>> refs;
  refs.reserve(kN);
  Clock::time_point t0 = Clock::now();
  for (int i = 0; i < kN; ++i) refs.push_back(raio::Task(Noop).Remote());
  Clock::time_point t_sub = Clock::now();
  auto first = raio::Wait(refs, kN);
  Clock::time_point t1 = Clock::now();
  if (first.ready.size() != kN || !first.pending.empty()) {
    throw std::runtime_error("Wait(1000 of 1000) returned " + std::to_string(first.ready.size()) +
                             " ready");
  }
  std::vector<double> all_us, one_us;
  for (int i = 0; i < reps; ++i) {
    Clock::time_point a = Clock::now();
    auto w = raio::Wait(refs, kN);
    all_us.push_back(MicrosSince(a, Clock::now()));
    if (w.ready.size() != kN) throw std::runtime_error("Wait(1000 of 1000 ready) not all ready");
  }
  for (int i = 0; i < reps; ++i) {
    Clock::time_point a = Clock::now();
    auto w = raio::Wait(refs, 1);
    one_us.push_back(MicrosSince(a, Clock::now()));
    if (w.ready.empty() || w.ready.size() + w.pending.size() != kN) {
      throw std::runtime_error("Wait(1 of 1000 ready) returned a wrong split");
    }
  }
  for (const auto& r : refs) r.Get();
  Row fresh = Make("Wait(1000 of 1000) after submitting 1k tasks", MicrosSince(t_sub, t1), "us");
  fresh.detail = {{"submit_us", MicrosSince(t0, t_sub)},
                  {"note", "from the end of submitting to all 1,000 ready: includes running them"}};
  Row all = Make("Wait(1000 of 1000 ready refs) (median)", Median(all_us), "us");
  all.detail = {{"reps", reps}, {"p99_us", Percentile(all_us, 99)}};
  Row one = Make("Wait(1 of 1000 ready refs) (median)", Median(one_us), "us");
  one.detail = {{"reps", reps}, {"p99_us", Percentile(one_us, 99)}};
  return {fresh, all, one};
}

// A "Key:   123 kB" line of /proc/<pid>/status, in kB; -1 when missing.
long StatusKb(const std::string& status_path, const char* key) {
  std::ifstream in(status_path);
  std::string line;
  const std::size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0) return std::strtol(line.c_str() + n, nullptr, 10);
  }
  return -1;
}

// Peak RSS (VmHWM, kB) of this process's direct children (the embedded cluster's workers),
// by pid.
std::vector<std::pair<long, long>> ChildrenVmHWMKb() {
  std::vector<std::pair<long, long>> out;
  const long self = static_cast<long>(::getpid());
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string status = e.path().string() + "/status";
    if (StatusKb(status, "PPid:") != self) continue;
    long hwm = StatusKb(status, "VmHWM:");
    if (hwm >= 0) out.emplace_back(std::stol(name), hwm);
  }
  return out;
}

// 1,000,000 no-op tasks submitted as fast as possible, then all Got. Submission stops
// early after 30 s (the row then names the count). Memory: the driver's VmHWM, which in
// the embedded cluster also holds the node daemon and the head (same process).
std::vector<Row> BenchMillion(const Options& opt, Watchdog& wd) {
  const int target_n = opt.quick ? 100000 : 1000000;
  const auto submit_budget = std::chrono::seconds(30);
  const long hwm_before = StatusKb("/proc/self/status", "VmHWM:");
  const long rss_before = StatusKb("/proc/self/status", "VmRSS:");

  wd.Enter("queued tasks: submit", std::chrono::seconds(90));
  std::vector<raio::ObjectRef<void>> refs;
  refs.reserve(target_n);
  const Clock::time_point t0 = Clock::now();
  bool cut = false;
  for (int i = 0; i < target_n; ++i) {
    if ((i & 4095) == 0 && Clock::now() - t0 > submit_budget) {
      cut = true;
      break;
    }
    refs.push_back(raio::Task(Noop).Remote());
  }
  const Clock::time_point t_sub = Clock::now();
  const long rss_queued = StatusKb("/proc/self/status", "VmRSS:");
  wd.Enter("queued tasks: Get all", std::chrono::seconds(180));
  for (const auto& r : refs) r.Get();
  const Clock::time_point t1 = Clock::now();
  const long rss_done = StatusKb("/proc/self/status", "VmRSS:");
  wd.Enter("queued tasks: release refs", std::chrono::seconds(90));
  const std::size_t n = refs.size();
  std::vector<raio::ObjectRef<void>>().swap(refs);
  const Clock::time_point t2 = Clock::now();
  const long hwm_after = StatusKb("/proc/self/status", "VmHWM:");
  // Let asynchronous frees settle, then read what remains.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long rss_after = StatusKb("/proc/self/status", "VmRSS:");
  long worker_max = 0;
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& [pid, kb] : ChildrenVmHWMKb()) {
    worker_max = std::max(worker_max, kb);
    workers.push_back({{"pid", pid}, {"vmhwm_kb", kb}});
  }

  const double secs = MicrosSince(t0, t1) / 1e6;
  std::string count = n == 1000000 ? std::string("1M") : std::to_string(n);
  std::string label = count + " queued no-op tasks";
  if (cut) label += " (cut at 30 s submit)";
  nlohmann::json d = {{"tasks", n},
                      {"target_tasks", target_n},
                      {"cut_short", cut},
                      {"submit_s", MicrosSince(t0, t_sub) / 1e6},
                      {"get_all_s", MicrosSince(t_sub, t1) / 1e6},
                      {"release_refs_s", MicrosSince(t1, t2) / 1e6},
                      {"driver_vmhwm_kb_before", hwm_before},
                      {"driver_vmhwm_kb_after", hwm_after},
                      {"driver_vmrss_kb_before", rss_before},
                      {"driver_vmrss_kb_all_queued", rss_queued},
                      {"driver_vmrss_kb_all_done", rss_done},
                      {"driver_vmrss_kb_after_release", rss_after},
                      {"worker_vmhwm_kb", workers},
                      {"note",
                       "VmRSS stays near the peak after the refs are released: glibc "
                       "keeps the freed heap (malloc_trim(0) brings it back to the "
                       "level before; repeated runs do not grow it)"},
                      {"cluster", std::getenv("RAIO_ADDRESS") ? "RAIO_ADDRESS: driver only"
                                                              : "embedded: driver process also "
                                                                "hosts the node daemon and head"}};
  Row time = Make(label + ": submit + Get all", secs, "s");
  time.detail = d;
  Row rate = Make(label + ": throughput", n / secs, "tasks/s");
  rate.detail = d;
  Row mem = AtMost(Make(label + ": driver+daemon+head peak RSS", hwm_after / 1024.0, "MiB"), 2048);
  mem.detail = d;
  Row wmem = Make(label + ": largest worker peak RSS", worker_max / 1024.0, "MiB");
  wmem.detail = d;
  return {time, rate, mem, wmem};
}

std::vector<Row> BenchPutGet(const Options& opt, Watchdog& wd) {
  const int warmup = opt.quick ? 500 : 2000;
  const int max_samples = opt.quick ? 5000 : 50000;
  const auto budget = opt.quick ? std::chrono::seconds(1) : std::chrono::seconds(4);

  wd.Enter("put/get warm-up", std::chrono::seconds(60));
  for (int i = 0; i < warmup; ++i) {
    if (raio::Put(i).Get() != i) {
      throw std::runtime_error("Put/Get returned a wrong value during warm-up");
    }
  }
  wd.Enter("put/get small int", std::chrono::seconds(60));
  std::vector<double> us;
  us.reserve(max_samples);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + budget;
  Clock::time_point last = start;
  int wrong = 0;
  for (int i = 0; static_cast<int>(us.size()) < max_samples && last < stop; ++i) {
    Clock::time_point t0 = Clock::now();
    int v = raio::Put(i).Get();
    last = Clock::now();
    if (v != i) ++wrong;
    us.push_back(MicrosSince(t0, last));
  }
  if (wrong > 0) {
    std::fprintf(stderr, "raio_bench: Put/Get returned %d wrong values\n", wrong);
  }
  const double total_s = MicrosSince(start, last) / 1e6;
  nlohmann::json d = {{"samples", us.size()},
                      {"wrong_values", wrong},
                      {"p99_us", Percentile(us, 99)},
                      {"max_us", Percentile(us, 100)},
                      {"total_s", total_s}};
  Row rate = Make("put+get small int", us.size() / total_s, "calls/s");
  rate.detail = d;
  Row lat = Make("put+get small int (median)", Median(us), "us");
  lat.detail = d;
  return {rate, lat};
}

// ---------------------------------------------------------------------------------------
// Actors (in the spirit of Ray's microbenchmark: 1:1 sync and async, concurrency, 1:n,
// n:n). Every actor is its own worker process; each benchmark kills its actors at the end
// (they would otherwise live until the job ends) after checking each actor's call count.

using Target = raio::ActorHandle<BenchTarget>;

// Creates a target actor and waits until it answers (its process is up, factory run);
// also checks that it lives outside the driver.
Target MakeTarget(int max_concurrency = 1) {
  Target t = raio::Actor(BenchTarget::Create).SetMaxConcurrency(max_concurrency).Remote();
  if (t.Task(&BenchTarget::Pid).Remote().Get() == static_cast<long>(::getpid())) {
    throw std::runtime_error("an actor runs in the driver process");
  }
  return t;
}

void ExpectCalls(const Target& t, long expected, const std::string& what) {
  long got = t.Task(&BenchTarget::Calls).Remote().Get();
  if (got != expected) {
    throw std::runtime_error(what + ": the actor ran " + std::to_string(got) + " calls, expected " +
                             std::to_string(expected));
  }
}

// Kills the actors even when a benchmark throws, so that none outlives it.
struct KillOnExit {
  std::vector<std::function<void()>> kills;
  template <typename H>
  void Add(const H& h) {
    kills.push_back([h] { h.Kill(); });
  }
  ~KillOnExit() {
    for (auto& k : kills) {
      try {
        k();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "raio_bench: killing an actor failed: %s\n", e.what());
      }
    }
  }
};

std::vector<Row> BenchActorSync(const Options& opt, Watchdog& wd) {
  const int warmup = opt.quick ? 200 : 1000;
  const int max_samples = opt.quick ? 5000 : 100000;
  const auto budget = opt.quick ? std::chrono::seconds(1) : std::chrono::seconds(4);

  wd.Enter("actor sync: create", std::chrono::seconds(60));
  KillOnExit killer;
  Target t = MakeTarget();
  killer.Add(t);

  wd.Enter("actor sync warm-up", std::chrono::seconds(60));
  for (int i = 0; i < warmup; ++i) t.Task(&BenchTarget::Noop).Remote().Get();

  wd.Enter("actor sync round trips", std::chrono::seconds(60));
  std::vector<double> us;
  us.reserve(max_samples);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + budget;
  Clock::time_point last = start;
  while (static_cast<int>(us.size()) < max_samples && last < stop) {
    Clock::time_point t0 = Clock::now();
    t.Task(&BenchTarget::Noop).Remote().Get();
    last = Clock::now();
    us.push_back(MicrosSince(t0, last));
  }
  const double total_s = MicrosSince(start, last) / 1e6;
  wd.Enter("actor sync: check", std::chrono::seconds(60));
  ExpectCalls(t, warmup + static_cast<long>(us.size()), "actor sync");
  nlohmann::json d = {{"samples", us.size()},          {"warmup", warmup},
                      {"min_us", Percentile(us, 0)},   {"p90_us", Percentile(us, 90)},
                      {"max_us", Percentile(us, 100)}, {"total_s", total_s}};
  Row med = AtMost(Make("actor 1:1 sync call (median)", Median(us), "us"), 50);
  med.detail = d;
  Row p99 = Make("actor 1:1 sync call (p99)", Percentile(us, 99), "us");
  p99.detail = d;
  Row tput = Make("actor 1:1 sync calls", us.size() / total_s, "calls/s");
  tput.detail = d;
  return {med, p99, tput};
}

// Rounds of one async batch: `round(i)` submits and Gets `calls` calls, returning the
// submit-done time; rates are calls/s over submit + Get. Stops early past `budget`.
struct Rounds {
  std::vector<double> rates;
  std::vector<double> submit_rates;
};
template <typename F>
Rounds RunRounds(const std::string& phase, int calls, int rounds, std::chrono::seconds budget,
                 Watchdog& wd, F round) {
  Rounds r;
  const Clock::time_point begin = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    if (i > 0 && Clock::now() - begin > budget) break;
    wd.Enter(phase + " round " + std::to_string(i + 1), std::chrono::seconds(90));
    Clock::time_point t0 = Clock::now();
    Clock::time_point t_submitted = round();
    Clock::time_point t1 = Clock::now();
    r.rates.push_back(calls / (MicrosSince(t0, t1) / 1e6));
    r.submit_rates.push_back(calls / (MicrosSince(t0, t_submitted) / 1e6));
  }
  return r;
}

std::vector<Row> RoundRows(const std::string& name, const Rounds& r, int calls,
                           std::optional<double> target, nlohmann::json extra = {}) {
  nlohmann::json d = {
      {"calls_per_round", calls}, {"rounds", r.rates.size()}, {"calls_per_s_each_round", r.rates}};
  if (!r.submit_rates.empty()) d["submit_only_calls_per_s_each_round"] = r.submit_rates;
  if (extra.is_object()) d.update(extra);
  Row best = Make(name + " (best)", *std::max_element(r.rates.begin(), r.rates.end()), "calls/s");
  Row med = Make(name + " (median)", Median(r.rates), "calls/s");
  if (target) {
    best = AtLeast(best, *target);
    med = AtLeast(med, *target);
  }
  best.detail = d;
  med.detail = d;
  return {best, med};
}

// The driver submits `calls` no-op calls round-robin over `targets`, then Gets them all.
Clock::time_point DriverBatch(const std::vector<Target>& targets, int calls) {
  std::vector<raio::ObjectRef<void>> refs;
  refs.reserve(calls);
  const std::size_t n = targets.size();
  for (int i = 0; i < calls; ++i) refs.push_back(targets[i % n].Task(&BenchTarget::Noop).Remote());
  Clock::time_point t_submitted = Clock::now();
  for (const auto& r : refs) r.Get();
  return t_submitted;
}

// 1:1 (max concurrency 1 and 4) and 1:n async from the driver.
std::vector<Row> BenchActorAsync(const Options& opt, Watchdog& wd) {
  constexpr int kBatch = 10000;
  const int rounds = opt.quick ? 3 : 10;
  const auto budget = opt.quick ? std::chrono::seconds(5) : std::chrono::seconds(10);
  std::vector<Row> rows;

  struct Case {
    std::string name;
    int actors;
    int max_concurrency;
    std::optional<double> target;
  };
  const std::vector<Case> cases = {
      {"actor 1:1 async, 10k calls", 1, 1, 100000},
      {"actor 1:1 async, max concurrency 4, 10k calls", 1, 4, std::nullopt},
      {"actor 1:4 async round-robin, 10k calls", 4, 1, std::nullopt},
  };
  for (const Case& c : cases) {
    wd.Enter(c.name + ": create", std::chrono::seconds(60));
    KillOnExit killer;
    std::vector<Target> targets;
    for (int i = 0; i < c.actors; ++i) {
      targets.push_back(MakeTarget(c.max_concurrency));
      killer.Add(targets.back());
    }
    wd.Enter(c.name + ": warm-up", std::chrono::seconds(60));
    DriverBatch(targets, 1000);
    Rounds r =
        RunRounds(c.name, kBatch, rounds, budget, wd, [&] { return DriverBatch(targets, kBatch); });
    wd.Enter(c.name + ": check", std::chrono::seconds(60));
    const long per_actor = (1000 + static_cast<long>(kBatch) * r.rates.size()) / c.actors;
    for (const Target& t : targets) ExpectCalls(t, per_actor, c.name);
    for (Row& row : RoundRows(c.name, r, kBatch, c.target,
                              {{"actors", c.actors}, {"max_concurrency", c.max_concurrency}})) {
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// n:n: n caller actors each make `per_caller` calls to their own target from inside an
// actor method; the driver starts them together and waits for all.
std::vector<Row> BenchActorNN(const Options& opt, Watchdog& wd) {
  constexpr int kPairs = 2;
  constexpr int kPerCaller = 5000;
  const int rounds = opt.quick ? 3 : 10;
  const auto budget = opt.quick ? std::chrono::seconds(5) : std::chrono::seconds(10);
  const std::string name = "actor n:n async (2 callers x 5k calls)";

  wd.Enter("actor n:n: create", std::chrono::seconds(60));
  KillOnExit killer;
  std::vector<raio::ActorHandle<BenchCaller>> callers;
  std::vector<Target> targets;
  for (int i = 0; i < kPairs; ++i) {
    targets.push_back(MakeTarget());
    killer.Add(targets.back());
    callers.push_back(raio::Actor(BenchCaller::Create).Remote());
    killer.Add(callers.back());
  }
  auto batch = [&](int per_caller) {
    std::vector<raio::ObjectRef<long>> refs;
    for (int i = 0; i < kPairs; ++i) {
      refs.push_back(callers[i].Task(&BenchCaller::CallMany).Remote(targets[i], per_caller));
    }
    Clock::time_point t_submitted = Clock::now();
    for (const auto& r : refs) {
      long done = r.Get();
      if (done != per_caller) {
        throw std::runtime_error("a caller actor completed " + std::to_string(done) +
                                 " calls, expected " + std::to_string(per_caller));
      }
    }
    return t_submitted;
  };
  wd.Enter("actor n:n: warm-up", std::chrono::seconds(60));
  batch(500);
  Rounds r = RunRounds("actor n:n", kPairs * kPerCaller, rounds, budget, wd,
                       [&] { return batch(kPerCaller); });
  wd.Enter("actor n:n: check", std::chrono::seconds(60));
  for (const Target& t : targets) {
    ExpectCalls(t, 500 + static_cast<long>(kPerCaller) * r.rates.size(), name);
  }
  r.submit_rates.clear();  // the driver submits only 2 calls: not meaningful
  return RoundRows(name, r, kPairs * kPerCaller, std::nullopt,
                   {{"callers", kPairs}, {"calls_per_caller", kPerCaller}});
}

// ---------------------------------------------------------------------------------------
// Large objects in the shared-memory store.

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

double GBps(std::size_t bytes, double us) { return bytes / (us / 1e6) / 1e9; }

std::string SizeName(std::size_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  return std::to_string(bytes / kMiB) + " MiB";
}

// Sentinel bytes at 16 evenly spaced places (and the last byte), so that a wrong copy
// or view is noticed without comparing every byte.
std::vector<std::size_t> SentinelPositions(std::size_t n) {
  std::vector<std::size_t> pos;
  for (std::size_t k = 0; k < 16; ++k) pos.push_back(k * (n / 16));
  pos.push_back(n - 1);
  return pos;
}
uint8_t SentinelValue(std::size_t k) { return static_cast<uint8_t>(0x11 + 13 * k); }

std::vector<uint8_t> MakePayload(std::size_t n) {
  std::vector<uint8_t> v(n, 0x5a);  // touches every page, outside the timed part
  auto pos = SentinelPositions(n);
  for (std::size_t k = 0; k < pos.size(); ++k) v[pos[k]] = SentinelValue(k);
  return v;
}

template <typename Bytes>
void CheckPayload(const Bytes& data, std::size_t got_size, std::size_t n, const std::string& what) {
  if (got_size != n) {
    throw std::runtime_error(what + ": size " + std::to_string(got_size) + ", expected " +
                             std::to_string(n));
  }
  auto pos = SentinelPositions(n);
  for (std::size_t k = 0; k < pos.size(); ++k) {
    if (data[pos[k]] != SentinelValue(k)) {
      throw std::runtime_error(what + ": wrong byte at offset " + std::to_string(pos[k]));
    }
  }
}

// The store deletes freed objects asynchronously; give it time, so that the next Put
// reuses the (pre-faulted) lowest offsets.
void WaitForAsyncDelete() { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

std::vector<Row> BenchObjectStore(const Options& opt, Watchdog& wd) {
  struct Size {
    std::size_t bytes;
    int put_reps, get_reps, view_reps;
  };
  const std::vector<Size> sizes =
      opt.quick ? std::vector<Size>{{kMiB, 10, 10, 10}, {100 * kMiB, 3, 3, 5}, {kGiB, 3, 1, 5}}
                : std::vector<Size>{{kMiB, 20, 20, 20}, {100 * kMiB, 5, 5, 10}, {kGiB, 3, 3, 10}};
  std::vector<Row> rows;
  for (const Size& sz : sizes) {
    const std::size_t n = sz.bytes;
    const std::string name = SizeName(n);
    wd.Enter("object store: prepare " + name, std::chrono::seconds(60));
    std::vector<uint8_t> payload = MakePayload(n);

    // Warm-up: the store pre-faults only its first 256 MiB; this faults the pages of the
    // region the timed Puts reuse.
    wd.Enter("object store: warm-up Put " + name, std::chrono::seconds(60));
    { auto warm = raio::Put(payload); }
    WaitForAsyncDelete();

    wd.Enter("object store: Put " + name, std::chrono::seconds(90));
    std::vector<double> put_us;
    raio::ObjectRef<std::vector<uint8_t>> ref;
    for (int i = 0; i < sz.put_reps; ++i) {
      if (i > 0) {
        ref = {};
        WaitForAsyncDelete();
      }
      Clock::time_point t0 = Clock::now();
      ref = raio::Put(payload);
      put_us.push_back(MicrosSince(t0, Clock::now()));
    }
    std::vector<uint8_t>().swap(payload);  // frees it

    // Typed Get: a copy into a new vector (allocation and page faults included).
    wd.Enter("object store: Get " + name, std::chrono::seconds(90));
    std::vector<double> get_us;
    for (int i = 0; i < sz.get_reps; ++i) {
      Clock::time_point t0 = Clock::now();
      std::vector<uint8_t> got = ref.Get();
      get_us.push_back(MicrosSince(t0, Clock::now()));
      CheckPayload(got, got.size(), n, "Get " + name);
    }

    wd.Enter("object store: GetView " + name, std::chrono::seconds(60));
    std::vector<double> view_us;
    for (int i = 0; i < sz.view_reps; ++i) {
      Clock::time_point t0 = Clock::now();
      raio::ArrayView<uint8_t> view = ref.GetView();
      view_us.push_back(MicrosSince(t0, Clock::now()));
      CheckPayload(view, view.size(), n, "GetView " + name);
    }
    ref = {};
    WaitForAsyncDelete();

    nlohmann::json d_put = {{"bytes", n},
                            {"reps", put_us.size()},
                            {"us_each", put_us},
                            {"best_GBps", GBps(n, Percentile(put_us, 0))}};
    Row put = Make("Put " + name + " vector<uint8_t> (median)", GBps(n, Median(put_us)), "GB/s");
    if (n == kGiB) put = AtLeast(put, 5);
    put.detail = d_put;
    nlohmann::json d_get = {{"bytes", n},
                            {"reps", get_us.size()},
                            {"us_each", get_us},
                            {"best_GBps", GBps(n, Percentile(get_us, 0))}};
    Row get = Make("Get " + name + " typed copy (median)", GBps(n, Median(get_us)), "GB/s");
    get.detail = d_get;
    nlohmann::json d_view = {{"bytes", n}, {"reps", view_us.size()}, {"us_each", view_us}};
    Row view = Make("GetView " + name + " (median)", Median(view_us), "us");
    if (n == kGiB) view = AtMost(view, 1000);
    view.detail = d_view;
    rows.push_back(put);
    rows.push_back(get);
    rows.push_back(view);
  }
  return rows;
}

// A task on a worker (another process on this node) that takes a large object as its
// argument: std::vector<uint8_t> (read in place, copied once into the parameter) and
// raio::Buffer (zero copy). Measures the round trip: submit to result.
std::vector<Row> BenchObjectArgs(const Options& opt, Watchdog& wd) {
  std::vector<Row> rows;
  const int reps = opt.quick ? 2 : 3;
  // Warms a worker up (it is started on demand) before the first timed task.
  wd.Enter("object args: worker warm-up", std::chrono::seconds(60));
  raio::Task(Noop).Remote().Get();

  for (std::size_t n : {100 * kMiB, kGiB}) {
    const std::string name = SizeName(n);
    wd.Enter("object args: Put " + name, std::chrono::seconds(60));
    raio::ObjectRef<std::vector<uint8_t>> ref;
    {
      std::vector<uint8_t> payload = MakePayload(n);
      ref = raio::Put(payload);
    }
    wd.Enter("object args: task taking vector " + name, std::chrono::seconds(120));
    std::vector<double> us;
    for (int i = 0; i < reps + 1; ++i) {  // the first one maps the object in the worker
      Clock::time_point t0 = Clock::now();
      std::vector<uint64_t> r = raio::Task(TouchVector).Remote(ref).Get();
      double t = MicrosSince(t0, Clock::now());
      if (r.size() != 3 || r[0] != n || r[1] != SentinelValue(0) || r[2] != SentinelValue(16)) {
        throw std::runtime_error("TouchVector(" + name + ") returned a wrong result");
      }
      if (i > 0) us.push_back(t);
    }
    ref = {};
    WaitForAsyncDelete();
    Row row = Make("task arg vector<uint8_t> " + name + " (median)", GBps(n, Median(us)), "GB/s");
    row.detail = {{"bytes", n},
                  {"reps", us.size()},
                  {"round_trip_us_each", us},
                  {"note", "round trip of a task copying the argument once into a vector"}};
    rows.push_back(row);
  }

  {
    const std::size_t n = kGiB;
    wd.Enter("object args: Put Buffer 1 GiB", std::chrono::seconds(60));
    raio::ObjectRef<raio::Buffer> ref;
    {
      std::vector<uint8_t> payload = MakePayload(n);
      raio::Buffer buf = raio::Buffer::Copy(payload.data(), payload.size());
      std::vector<uint8_t>().swap(payload);  // frees it
      ref = raio::Put(buf);
    }
    wd.Enter("object args: task taking Buffer 1 GiB", std::chrono::seconds(60));
    std::vector<double> us;
    const int buf_reps = opt.quick ? 5 : 10;
    for (int i = 0; i < buf_reps + 1; ++i) {
      Clock::time_point t0 = Clock::now();
      std::vector<uint64_t> r = raio::Task(TouchBuffer).Remote(ref).Get();
      double t = MicrosSince(t0, Clock::now());
      if (r.size() != 3 || r[0] != n || r[1] != SentinelValue(0) || r[2] != SentinelValue(16)) {
        throw std::runtime_error("TouchBuffer(1 GiB) returned a wrong result");
      }
      if (i > 0) us.push_back(t);
    }
    ref = {};
    WaitForAsyncDelete();
    Row row = Make("task arg Buffer 1 GiB round trip (median)", Median(us), "us");
    row.detail = {{"bytes", n},
                  {"reps", us.size()},
                  {"round_trip_us_each", us},
                  {"note", "zero copy: the worker views the object in shared memory"}};
    rows.push_back(row);
  }
  return rows;
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// Runs this binary in startup mode `runs` times; each child starts its own embedded
// cluster (or joins RAIO_ADDRESS), so this measures a cold start in a fresh process.
std::vector<Row> BenchStartup(const Options& opt, Watchdog& wd) {
  const std::string exe = SelfExe();
  std::vector<double> start_ms, down_ms, process_ms;
  int failures = 0;
  for (int i = 0; i < opt.startup_runs; ++i) {
    wd.Enter("startup child " + std::to_string(i + 1), std::chrono::seconds(60));
    // `timeout` bounds a hung child; its output goes to our stdout only via the pipe.
    std::string cmd = std::string("env ") + kStartupEnv + "=1 timeout 45 '" + exe + "'";
    Clock::time_point t0 = Clock::now();
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) {
      ++failures;
      continue;
    }
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
    int status = ::pclose(pipe);
    Clock::time_point t1 = Clock::now();
    double s = 0, d = 0;
    std::size_t pos = out.find(kStartupLinePrefix);
    if (status != 0 || pos == std::string::npos ||
        std::sscanf(out.c_str() + pos + std::strlen(kStartupLinePrefix),
                    " start_to_first_result_ms=%lf shutdown_ms=%lf", &s, &d) != 2) {
      std::fprintf(stderr, "raio_bench: startup child %d failed (status %d), output:\n%s\n", i + 1,
                   status, out.c_str());
      ++failures;
      continue;
    }
    start_ms.push_back(s);
    down_ms.push_back(d);
    process_ms.push_back(MicrosSince(t0, t1) / 1000.0);
  }
  nlohmann::json det = {{"runs", opt.startup_runs},
                        {"failures", failures},
                        {"start_to_first_result_ms_each", start_ms},
                        {"shutdown_ms_each", down_ms},
                        {"child_process_wall_ms_each", process_ms}};
  Row start = AtMost(Make("start to first result (median)", Median(start_ms), "ms"), 300);
  start.detail = det;
  Row down = Make("shutdown (median)", Median(down_ms), "ms");
  down.detail = det;
  Row proc = Make("child process wall time (median)", Median(process_ms), "ms");
  proc.detail = det;
  return {start, down, proc};
}

// ---------------------------------------------------------------------------------------
// Machine description and JSON output.

std::string FirstMatch(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

std::string RunAndRead(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

nlohmann::json MachineDescription() {
  nlohmann::json m;
  m["nproc"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  m["hardware_concurrency"] = std::thread::hardware_concurrency();
  m["cpu_model"] = FirstMatch("/proc/cpuinfo", "model name");
  std::string mem = FirstMatch("/proc/meminfo", "MemTotal");  // "16384000 kB"
  m["memory_total"] = mem;
  if (!mem.empty()) m["memory_total_bytes"] = std::strtoll(mem.c_str(), nullptr, 10) * 1024;
  struct utsname u {};
  if (::uname(&u) == 0) {
    m["hostname"] = u.nodename;
    m["kernel"] = std::string(u.sysname) + " " + u.release;
    m["arch"] = u.machine;
  }
  return m;
}

// The 1-minute load average, or a negative value when unknown. Other work on the machine
// changes these figures a lot (in both directions), so it is printed and recorded.
double LoadAverage1m() {
  std::ifstream in("/proc/loadavg");
  double v = -1;
  if (!(in >> v)) return -1;
  return v;
}

std::string UtcTimestamp(const char* fmt) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), fmt, &tm);
  return buf;
}

void WriteJson(const std::vector<Row>& rows, const Options& opt, double total_s, double load_before,
               double load_after) {
  nlohmann::json j;
  j["timestamp_utc"] = UtcTimestamp("%Y-%m-%dT%H:%M:%SZ");
  j["machine"] = MachineDescription();
  j["machine"]["loadavg_1m_before"] = load_before;
  j["machine"]["loadavg_1m_after"] = load_after;
  j["cluster"] = std::getenv("RAIO_ADDRESS") ? std::string("address ") + std::getenv("RAIO_ADDRESS")
                                             : std::string("embedded");
  j["git_commit"] = RunAndRead(std::string("git -C '") + RAIO_BENCH_SOURCE_DIR +
                               "' rev-parse --short HEAD 2>/dev/null");
#ifdef NDEBUG
  j["build"] = "NDEBUG";
#else
  j["build"] = "assertions on (not a Release build?)";
#endif
  j["quick"] = opt.quick;
  j["total_run_s"] = total_s;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json e = {
        {"benchmark", r.benchmark},
        {"result", std::isfinite(r.value) ? nlohmann::json(r.value) : nlohmann::json(nullptr)},
        {"unit", r.unit},
        {"target", r.target_text.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.target_text)},
        {"pass", r.pass ? nlohmann::json(*r.pass) : nlohmann::json(nullptr)},
        {"detail", r.detail}};
    arr.push_back(e);
  }
  j["results"] = arr;

  std::filesystem::path file;
  std::error_code ec;
  if (!opt.json_path.empty()) {
    file = opt.json_path;
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  } else {
    std::filesystem::path dir = std::filesystem::path(RAIO_BENCH_SOURCE_DIR) / "results";
    std::filesystem::create_directories(dir, ec);
    file = dir / (UtcTimestamp("%Y%m%dT%H%M%SZ") + ".json");
  }
  std::ofstream out(file);
  if (!out) {
    std::fprintf(stderr, "raio_bench: cannot write %s\n", file.c_str());
    return;
  }
  out << j.dump(2) << "\n";
  std::printf("results written to %s\n", file.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Taken before Init for the startup child; reading the clock has no side effects.
  const Clock::time_point t_before_init = Clock::now();
  const bool startup_child = std::getenv(kStartupEnv) != nullptr;
  raio::InitOptions init_options;
  // Embedded cluster only (Init refuses it with RAIO_ADDRESS); startup children keep the
  // default, as a plain Init would.
  if (!startup_child && std::getenv("RAIO_ADDRESS") == nullptr) {
    init_options.object_store_memory_bytes = kObjectStoreBytes;
  }
  // Workers re-run this binary and never get past this line.
  raio::Init(init_options, argc, argv);
  if (startup_child) return RunStartupChild(t_before_init);

  std::optional<Options> opt = ParseOptions(argc, argv);
  if (!opt) {
    raio::Shutdown();
    return 2;
  }
  const long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  const double load_before = LoadAverage1m();
  std::printf("raio_bench: %s cluster, %ld CPUs, load average %.2f%s\n",
              std::getenv("RAIO_ADDRESS") ? "RAIO_ADDRESS" : "embedded", ncpu, load_before,
              opt->quick ? ", --quick" : "");
  if (load_before > 0.5 * ncpu) {
    std::printf("warning: the machine is busy; figures will be noisy\n");
  }
  std::fflush(stdout);

  const Clock::time_point t_start = Clock::now();
  std::vector<Row> rows;
  int rc = 0;
  {
    Watchdog wd;
    auto run = [&](const char* name, auto fn) {
      std::printf("  %s ...\n", name);
      std::fflush(stdout);
      Clock::time_point t0 = Clock::now();
      try {
        for (auto& r : fn(*opt, wd)) rows.push_back(std::move(r));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "raio_bench: %s failed: %s\n", name, e.what());
        rc = 1;
      }
      std::printf("    (%.1f s)\n", MicrosSince(t0, Clock::now()) / 1e6);
      std::fflush(stdout);
    };
    run("sanity check (Echo x2000, worker pid)", SanityCheck);
    run("sync no-op tasks", BenchSync);
    run("async no-op tasks", BenchAsync);
    run("multi-client async tasks (4 clients x 2,500 tasks)", BenchMultiClient);
    run("batches of 1,000 tasks then Get", BenchBatches);
    run("user loop (20,000 Echo tasks, Get each, free)", BenchUserLoop);
    run("Wait on 1,000 refs", BenchWait);
    run("put/get small int", BenchPutGet);
    run("actor 1:1 sync calls", BenchActorSync);
    run("actor async calls: 1:1, 1:1 max concurrency 4, 1:4", BenchActorAsync);
    run("actor n:n async calls (2 callers, 2 targets)", BenchActorNN);
    // Before the object store rows: their 1 GiB objects would set the driver's VmHWM.
    if (opt->million) run("1,000,000 queued no-op tasks", BenchMillion);
    run("object store: Put/Get/GetView 1 MiB, 100 MiB, 1 GiB", BenchObjectStore);
    run("object store: task arguments 100 MiB, 1 GiB", BenchObjectArgs);
    run("start to first result (child processes)", BenchStartup);
    wd.Enter("shutdown", std::chrono::seconds(60));
    raio::Shutdown();
  }
  const double total_s = MicrosSince(t_start, Clock::now()) / 1e6;

  const double load_after = LoadAverage1m();
  PrintTable(rows);
  std::printf("total %.1f s, load average %.2f before, %.2f after\n", total_s, load_before,
              load_after);
  if (opt->write_json) WriteJson(rows, *opt, total_s, load_before, load_after);
  return rc;
}
