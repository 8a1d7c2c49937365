// `make bench-llm`: LLM serving throughput on the bundled stories260K model.
//
//  1. Single-stream greedy decode, tokens/s: a plain single-threaded C-style forward pass
//     with a KV cache (tests/llm/reference_llama.h) vs the engine (libtorch, one thread).
//  2. Aggregate output tokens/s at 1, 8, 32 and 64 concurrent streams, closed loop (each
//     stream sends its next request when the previous one finishes), prompts of 8-32
//     tokens and outputs of 16-256 tokens drawn from a fixed seed; continuous batching vs
//     static batching (a batch is admitted only when the previous one has fully finished)
//     on the same requests.
// Prints a table and writes bench/results/llm-<UTC timestamp>.json.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "raio/llm/engine.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "reference_llama.h"

namespace {

using raio::llm::Engine;
using raio::llm::EngineConfig;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

raio::llm::LoadedModel Load() {
  auto m = raio::llm::LoadModelDir(RAIO_LLM_MODEL_DIR);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(m);
}

std::unique_ptr<Engine> MakeEngine(const EngineConfig& config) {
  auto e = Engine::Create(Load(), config);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(e);
}

raio::llm::SamplingParams Greedy(int n) {
  raio::llm::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

// Best of three runs of `n` greedy decode steps from BOS.
double PlainDecodeTokensPerSecond(const raio::llm::ModelWeights& w, int n) {
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    raio::llm::testing::ReferenceLlama ref(w);
    int token = 1;
    auto t0 = Clock::now();
    for (int pos = 0; pos < n; ++pos) token = ref.Argmax(ref.Forward(token, pos));
    best = std::max(best, n / Since(t0));
  }
  return best;
}

double EngineDecodeTokensPerSecond(int n) {
  auto e = MakeEngine({.enable_prefix_caching = false});
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    auto t0 = Clock::now();
    auto r = e->Generate({1}, Greedy(n));
    best = std::max(best, static_cast<double>(r->token_ids.size()) / Since(t0));
  }
  return best;
}

struct Workload {
  std::vector<std::vector<int>> prompts;
  std::vector<int> outputs;
};

Workload MakeLoad(int n) {
  std::mt19937 rng(2024);
  Workload l;
  for (int i = 0; i < n; ++i) {
    std::vector<int> p = {1};
    int len = 8 + static_cast<int>(rng() % 25);
    for (int k = 0; k < len; ++k) p.push_back(3 + static_cast<int>(rng() % 509));
    l.prompts.push_back(p);
    l.outputs.push_back(16 + static_cast<int>(rng() % 241));
  }
  return l;
}

struct LoadResult {
  double tokens_per_s;
  int64_t steps;
};

// Output tokens/s (and engine steps) with `streams` closed-loop streams sending
// `per_stream` requests each.
LoadResult AggregateTokensPerSecond(int streams, int per_stream, bool static_batching) {
  auto e = MakeEngine({.max_num_seqs = std::max(streams, 1),
                       .max_num_batched_tokens = 2048,
                       .enable_prefix_caching = false,
                       .static_batching = static_batching});
  const Workload load = MakeLoad(streams * per_stream);
  int64_t generated = 0;
  int next = 0, finished = 0;
  std::vector<bool> done(streams, false);
  auto submit = [&](int stream) {
    int i = next++;
    auto id = e->AddRequest(load.prompts[i], Greedy(load.outputs[i]),
                            [&, stream](const raio::llm::RequestOutput& o) {
                              generated += static_cast<int64_t>(o.token_ids.size());
                              if (o.finished) done[stream] = true;
                            });
    if (!id.ok()) std::exit(1);
  };
  auto t0 = Clock::now();
  std::vector<int> sent(streams, 0);
  for (int s = 0; s < streams; ++s) submit(s), ++sent[s];
  int64_t steps = 0;
  while (finished < streams * per_stream) {
    e->Step();
    ++steps;
    for (int s = 0; s < streams; ++s) {
      if (!done[s]) continue;
      done[s] = false;
      ++finished;
      if (sent[s] < per_stream) submit(s), ++sent[s];
    }
  }
  return {static_cast<double>(generated) / Since(t0), steps};
}

}  // namespace

int main() {
  raio::llm::SetTorchThreads(1);
  const raio::llm::LoadedModel model = Load();
  const int kDecode = 256;
  const double plain = PlainDecodeTokensPerSecond(model.weights, kDecode);
  const double engine1 = EngineDecodeTokensPerSecond(kDecode);
  std::printf("stories260K, 1 libtorch thread, greedy\n\n");
  std::printf("single-stream decode (%d tokens from BOS)   tokens/s\n", kDecode);
  std::printf("  plain C forward pass with KV cache        %9.0f\n", plain);
  std::printf("  raio::llm::Engine                         %9.0f   (%.2fx plain)\n\n", engine1,
              engine1 / plain);
  std::printf(
      "streams   continuous tok/s (steps)   static tok/s (steps)   cont/static   cont/plain\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int streams : {1, 8, 32, 64}) {
    const int per_stream = streams == 1 ? 8 : 4;
    const LoadResult cont = AggregateTokensPerSecond(streams, per_stream, false);
    const LoadResult stat = AggregateTokensPerSecond(streams, per_stream, true);
    std::printf("  %3d     %10.0f (%5lld)         %10.0f (%5lld)       %6.2fx      %6.2fx\n",
                streams, cont.tokens_per_s, static_cast<long long>(cont.steps), stat.tokens_per_s,
                static_cast<long long>(stat.steps), cont.tokens_per_s / stat.tokens_per_s,
                cont.tokens_per_s / plain);
    std::fflush(stdout);
    rows.push_back({{"streams", streams},
                    {"continuous_tok_s", cont.tokens_per_s},
                    {"continuous_steps", cont.steps},
                    {"static_tok_s", stat.tokens_per_s},
                    {"static_steps", stat.steps}});
  }
  nlohmann::json out = {
      {"plain_decode_tok_s", plain}, {"engine_decode_tok_s", engine1}, {"concurrency", rows}};
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", std::gmtime(&now));
  std::filesystem::create_directories(RAIO_BENCH_SOURCE_DIR "/../results");
  std::ofstream(std::string(RAIO_BENCH_SOURCE_DIR "/../results/llm-") + stamp + ".json")
      << out.dump(2) << "\n";
  return 0;
}
