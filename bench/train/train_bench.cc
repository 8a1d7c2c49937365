// `make bench-train`: raio::train's overheads beside their floors, measured in one run.
//
//  1. Time per training step of the bundled stories260K model (full fine-tuning, AdamW, a
//     batch of 8 sequences of 256 tokens, 1 libtorch thread) in a plain libtorch loop in
//     this process, then in raio's trainer with 1 worker and with 2 workers (the 2-worker
//     row adds the gradients' all-reduce; each worker keeps the same batch).
//  2. All-reduce of 1 MiB (stories260K's gradients) and 64 MiB of float32 over 2 ranks:
//     raio's GradientAllReducer (bucketed, 25 MiB buckets) in a 2-worker trainer, against
//     one Gloo all-reduce of a flat tensor of the same size between 2 plain processes
//     (this binary re-run with --gloo-peer, a c10d FileStore rendezvous): Gloo alone.
//  3. Checkpoints of 256 MiB: Report() with a checkpoint directory (persisted atomically:
//     copy, fsync, rename) and the resumed run's read of it (torch::load), against
//     std::filesystem::copy of the same directory and a plain read of its files.
//
// Prints a table and writes bench/results/train-<UTC timestamp>.json. Medians; the
// machine's other load shows in them (see bench/train/README.md).
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "nlohmann/json.hpp"
#include "raio/llm/model_dir.h"
#include "raio/raio.h"
#include "raio/train/llama.h"
#include "raio/train/sft.h"
#include "raio/train/train.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using raio::train::Metrics;
using raio::train::TrainContext;

constexpr int kBatch = 8;
constexpr int kSeqLen = 256;
constexpr int kWarmupSteps = 5;
constexpr int kSteps = 30;
constexpr int kAllReduceIters = 10;
constexpr int64_t kCheckpointBytes = int64_t{256} << 20;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The model and the batch every process builds alike (fixed seeds).
struct StepSetup {
  std::shared_ptr<raio::train::TrainableLlama> model;
  torch::Tensor input_ids, mask;
};

StepSetup MakeStepSetup() {
  auto loaded = raio::llm::LoadModelDir(RAIO_LLM_MODEL_DIR);
  if (!loaded.ok()) throw std::runtime_error(std::string(loaded.status().message()));
  auto model = raio::train::TrainableLlama::Create(loaded->weights, {.lora = std::nullopt});
  if (!model.ok()) throw std::runtime_error(std::string(model.status().message()));
  torch::manual_seed(7);
  StepSetup s;
  s.model = *model;
  s.input_ids = torch::randint(1, s.model->config().vocab_size, {kBatch, kSeqLen}, torch::kLong);
  s.mask = torch::ones({kBatch, kSeqLen}, torch::kLong);
  return s;
}

// Times kSteps steps after kWarmupSteps; `all_reduce` runs between backward and the update.
template <typename AllReduce>
double TimeSteps(StepSetup& s, AllReduce all_reduce) {
  torch::optim::AdamW optimizer(s.model->parameters(), torch::optim::AdamWOptions(1e-4));
  std::vector<double> times;
  for (int i = 0; i < kWarmupSteps + kSteps; ++i) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    auto logits = s.model->Forward(s.input_ids, s.mask);
    if (!logits.ok()) throw std::runtime_error(std::string(logits.status().message()));
    torch::Tensor loss = raio::train::CausalLmLoss(*logits, s.input_ids);
    loss.backward();
    all_reduce();
    optimizer.step();
    if (i >= kWarmupSteps) times.push_back(Ms(Clock::now() - start));
  }
  return Median(times);
}

// The same loop inside raio's trainer: the reducer's all-reduce each step, a report every
// 10 steps (as a loop that logs its loss would).
void StepLoop(TrainContext& ctx) {
  StepSetup s = MakeStepSetup();
  raio::train::GradientAllReducer reducer = raio::train::PrepareModel(ctx, *s.model);
  int step = 0;
  const double median = TimeSteps(s, [&] {
    reducer.AllReduce();
    if (++step % 10 == 0) ctx.Report({{"step", step}});
  });
  ctx.Report(
      {{"step_ms", median}, {"allreduce_bytes", static_cast<double>(reducer.bytes_per_call())}});
}
RAIO_TRAIN_FUNCTION(StepLoop);

// Gradients of GetConfig()["bytes"] float32 in 4 MiB parameters (or one smaller one).
void AllReduceLoop(TrainContext& ctx) {
  const int64_t bytes = ctx.GetConfig().at("bytes").get<int64_t>();
  const int64_t per_param = std::min<int64_t>(bytes, int64_t{4} << 20) / 4;
  std::vector<torch::Tensor> params;
  for (int64_t left = bytes / 4; left > 0; left -= per_param) {
    torch::Tensor p = torch::zeros({std::min(left, per_param)}).requires_grad_(true);
    p.mutable_grad() = torch::full_like(p, ctx.GetWorldRank() + 1.0);
    params.push_back(p);
  }
  raio::train::GradientAllReducer reducer(ctx.GetProcessGroup(), params);
  std::vector<double> times;
  for (int i = 0; i < kAllReduceIters + 2; ++i) {
    const auto start = Clock::now();
    reducer.AllReduce();
    if (i >= 2) times.push_back(Ms(Clock::now() - start));
  }
  // Mean of 1 and 2 after the first call; it stays 1.5 after later ones.
  if (std::abs(params[0].grad()[0].item<double>() - 1.5) > 1e-6) {
    throw std::runtime_error("the all-reduce gave a wrong mean");
  }
  ctx.Report({{"ms", Median(times)}});
}
RAIO_TRAIN_FUNCTION(AllReduceLoop);

// A fresh run saves a checkpoint of kCheckpointBytes (64 tensors); the resumed run reads it.
void CheckpointLoop(TrainContext& ctx) {
  if (const auto& checkpoint = ctx.GetCheckpoint(); checkpoint.has_value()) {
    const auto start = Clock::now();
    int64_t bytes = 0;
    for (int i = 0; i < 64; ++i) {
      torch::Tensor t;
      torch::load(t, checkpoint->path + "/t" + std::to_string(i) + ".pt");
      bytes += t.numel() * 4;
    }
    ctx.Report({{"restore_ms", Ms(Clock::now() - start)}, {"bytes", static_cast<double>(bytes)}});
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("raio_bench_ckpt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (int i = 0; i < 64; ++i) {
    torch::save(torch::full({kCheckpointBytes / 64 / 4}, static_cast<float>(i)),
                (dir / ("t" + std::to_string(i) + ".pt")).string());
  }
  const auto start = Clock::now();
  ctx.Report({{"epoch", 0}}, dir.string());
  const double ms = Ms(Clock::now() - start);
  fs::remove_all(dir);
  ctx.Report({{"save_ms", ms}});
}
RAIO_TRAIN_FUNCTION(CheckpointLoop);

raio::train::Result Fit(raio::train::TrainFunction fn, int workers, const std::string& storage,
                        const std::string& name, nlohmann::json config = nlohmann::json::object()) {
  raio::train::Trainer trainer(fn, {.num_workers = workers, .resources_per_worker = {{"CPU", 1}}},
                               {.name = name, .storage_path = storage}, std::move(config));
  raio::train::Result result = trainer.Fit();
  if (!result.error.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", name.c_str(),
                 std::string(result.error.message()).c_str());
    std::exit(1);
  }
  return result;
}

// Gloo alone: one rank of a 2-process all-reduce of `bytes` float32; rank 0 prints the
// median time in ms.
int GlooPeer(int rank, const std::string& store_path, int64_t bytes) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, rank, 2, options);
  std::vector<torch::Tensor> tensors{torch::full({bytes / 4}, rank + 1.0f)};
  std::vector<double> times;
  for (int i = 0; i < kAllReduceIters + 2; ++i) {
    const auto start = Clock::now();
    group.allreduce(tensors)->wait();
    if (i >= 2) times.push_back(Ms(Clock::now() - start));
  }
  if (rank == 0) std::printf("%f\n", Median(times));
  return 0;
}

double GlooAlone(const char* self, int64_t bytes) {
  const fs::path store =
      fs::temp_directory_path() / ("raio_bench_gloo_" + std::to_string(getpid()));
  fs::remove(store);
  const fs::path out = store.string() + ".out";
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      if (rank == 0 && freopen(out.c_str(), "w", stdout) == nullptr) _exit(127);
      execl(self, self, "--gloo-peer", std::to_string(rank).c_str(), store.c_str(),
            std::to_string(bytes).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double ms = 0;
  std::ifstream(out) >> ms;
  fs::remove(store);
  fs::remove(out);
  if (!ok || ms <= 0) {
    std::fprintf(stderr, "the Gloo-alone all-reduce failed\n");
    std::exit(1);
  }
  return ms;
}

// Plain copies of a 256 MiB directory: fs::copy then fsync of each file (the floor of a
// persisted checkpoint), and a read of every byte (the floor of a restore).
std::pair<double, double> FileFloors(const fs::path& base) {
  const fs::path src = base / "floor_src", dst = base / "floor_dst";
  fs::create_directories(src);
  std::vector<char> buffer(kCheckpointBytes / 64, 'x');
  for (int i = 0; i < 64; ++i) {
    std::ofstream(src / ("t" + std::to_string(i)), std::ios::binary)
        .write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  }
  auto start = Clock::now();
  fs::copy(src, dst, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(dst)) {
    FILE* f = std::fopen(entry.path().c_str(), "r");
    if (f != nullptr) {
      fsync(fileno(f));
      std::fclose(f);
    }
  }
  const double copy_ms = Ms(Clock::now() - start);
  start = Clock::now();
  for (const auto& entry : fs::directory_iterator(dst)) {
    std::ifstream in(entry.path(), std::ios::binary);
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  }
  const double read_ms = Ms(Clock::now() - start);
  fs::remove_all(src);
  fs::remove_all(dst);
  return {copy_ms, read_ms};
}

double MiBps(double bytes, double ms) { return bytes / (1 << 20) / (ms / 1000.0); }

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  if (argc == 5 && std::string(argv[1]) == "--gloo-peer") {
    return GlooPeer(std::atoi(argv[2]), argv[3], std::atoll(argv[4]));
  }
  at::set_num_threads(1);
  nlohmann::json results;

  // Gloo alone first, before raio's cluster holds the CPUs.
  const std::vector<int64_t> sizes{int64_t{1} << 20, int64_t{64} << 20};
  std::vector<double> gloo_ms;
  for (int64_t bytes : sizes) gloo_ms.push_back(GlooAlone(argv[0], bytes));

  StepSetup plain = MakeStepSetup();
  const double plain_ms = TimeSteps(plain, [] {});

  raio::InitOptions init;
  init.num_cpus = 2;
  raio::Init(init);
  const fs::path storage =
      fs::temp_directory_path() / ("raio_bench_train_" + std::to_string(getpid()));
  const double one_ms = Fit(StepLoop, 1, storage, "step1").metrics.at("step_ms");
  const Metrics two = Fit(StepLoop, 2, storage, "step2").metrics;
  const double two_ms = two.at("step_ms");
  std::vector<double> raio_ms;
  for (int64_t bytes : sizes) {
    raio_ms.push_back(
        Fit(AllReduceLoop, 2, storage, "allreduce" + std::to_string(bytes), {{"bytes", bytes}})
            .metrics.at("ms"));
  }
  const double save_ms = Fit(CheckpointLoop, 1, storage, "ckpt").metrics.at("save_ms");
  const double restore_ms = Fit(CheckpointLoop, 1, storage, "ckpt").metrics.at("restore_ms");
  const auto [copy_ms, read_ms] = FileFloors(storage);
  raio::Shutdown();
  fs::remove_all(storage);

  const double mib = static_cast<double>(kCheckpointBytes);
  std::printf("stories260K full fine-tuning, batch %dx%d, AdamW, 1 libtorch thread per process\n\n",
              kBatch, kSeqLen);
  std::printf("step time (median of %d)                 ms/step   vs plain libtorch\n", kSteps);
  std::printf("  plain libtorch loop, 1 process         %8.2f\n", plain_ms);
  std::printf("  raio::train, 1 worker                  %8.2f   %+6.1f%%   (target within 5%%)\n",
              one_ms, 100.0 * (one_ms - plain_ms) / plain_ms);
  std::printf(
      "  raio::train, 2 workers (same batch     %8.2f   %+6.1f%%   (all-reduce of %.2f MiB)\n",
      two_ms, 100.0 * (two_ms - plain_ms) / plain_ms, two.at("allreduce_bytes") / (1 << 20));
  std::printf("    each, twice the global batch)\n\n");
  std::printf(
      "all-reduce, 2 ranks, float32    Gloo alone ms  MiB/s    raio ms  MiB/s   raio/Gloo\n");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double b = static_cast<double>(sizes[i]);
    std::printf("  %4lld MiB                        %9.2f %7.0f  %9.2f %7.0f   %6.2fx\n",
                static_cast<long long>(sizes[i] >> 20), gloo_ms[i], MiBps(b, gloo_ms[i]),
                raio_ms[i], MiBps(b, raio_ms[i]), raio_ms[i] / gloo_ms[i]);
  }
  std::printf("\ncheckpoint of 256 MiB (64 files)       ms      MiB/s   floor ms  MiB/s\n");
  std::printf("  save: Report(metrics, dir)      %8.1f  %8.0f   %8.1f %6.0f  (copy + fsync)\n",
              save_ms, MiBps(mib, save_ms), copy_ms, MiBps(mib, copy_ms));
  std::printf("  restore: torch::load on resume  %8.1f  %8.0f   %8.1f %6.0f  (plain read)\n",
              restore_ms, MiBps(mib, restore_ms), read_ms, MiBps(mib, read_ms));

  results["step_ms"] = {{"plain", plain_ms}, {"raio_1_worker", one_ms}, {"raio_2_workers", two_ms}};
  for (size_t i = 0; i < sizes.size(); ++i) {
    results["allreduce"].push_back(
        {{"bytes", sizes[i]}, {"gloo_ms", gloo_ms[i]}, {"raio_ms", raio_ms[i]}});
  }
  results["checkpoint"] = {{"bytes", kCheckpointBytes},
                           {"save_ms", save_ms},
                           {"restore_ms", restore_ms},
                           {"copy_fsync_ms", copy_ms},
                           {"read_ms", read_ms}};
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
  fs::create_directories(RAIO_BENCH_SOURCE_DIR "/../results");
  std::ofstream(std::string(RAIO_BENCH_SOURCE_DIR "/../results/train-") + stamp + ".json")
      << results.dump(2) << "\n";
  return 0;
}
