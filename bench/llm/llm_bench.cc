// `make bench-llm`: LLM serving throughput on the bundled stories260K model.
//
//  1. Single-stream greedy decode, tokens/s: a plain single-threaded C-style forward pass
//     with a KV cache (tests/llm/reference_llama.h) vs the engine (libtorch, one thread).
//  2. Aggregate output tokens/s at 1, 8, 32 and 64 concurrent streams, closed loop (each
//     stream sends its next request when the previous one finishes), prompts of 8-32
//     tokens and outputs of 16-256 tokens drawn from a fixed seed; continuous batching vs
//     static batching (a batch is admitted only when the previous one has fully finished)
//     on the same requests.
//  3. Through HTTP (OpenAiServer on loopback, a Beast client, streaming requests): time to
//     first token p50/p99 and inter-token latency p50/p99 at a fixed request rate (open
//     loop, Poisson arrivals), beside the same arrivals sent straight to the Engine (the
//     floor); the engine in this process, and in a raio actor as `raio llm serve` runs it.
//  4. The HTTP front's own cost per request: one small request (prompt [1], 1 token)
//     sequentially through HTTP vs Engine::Generate on the same started engine.
// Prints a table and writes bench/results/llm-<UTC timestamp>.json. `--http-only` runs
// parts 3 and 4 only.
#include <raio/raio.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "http_client.h"
#include "raio/llm/engine.h"
#include "raio/llm/engine_actor.h"
#include "raio/llm/engine_client.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "raio/llm/openai_server.h"
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

// p in [0, 1] of `v` (nearest rank); 0 when empty.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

// Per request: seconds from its send to each output that carried tokens.
using EventTimes = std::vector<std::vector<double>>;

struct LatencyRow {
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0, tpot_p50_ms = 0;
  double achieved_rps = 0;
  int failed = 0;
  nlohmann::json Json() const {
    return {{"ttft_p50_ms", ttft_p50_ms},
            {"ttft_p99_ms", ttft_p99_ms},
            {"itl_p50_ms", itl_p50_ms},
            {"itl_p99_ms", itl_p99_ms},
            {"tpot_p50_ms", tpot_p50_ms},
            {"achieved_rps", achieved_rps},
            {"failed", failed}};
  }
};

// TTFT over requests; inter-token latency over every gap between consecutive outputs of
// a request, and time per output token per request ((last - first) / (outputs - 1)), as
// vLLM's benchmark_serving defines them. ITL is per delivered chunk: a front that sends
// several tokens per chunk shows short gaps inside a burst, TPOT does not.
LatencyRow Summarize(const EventTimes& events, double wall_s) {
  LatencyRow row;
  std::vector<double> ttft, itl, tpot;
  for (const std::vector<double>& e : events) {
    if (e.empty()) {
      ++row.failed;
      continue;
    }
    ttft.push_back(e[0] * 1e3);
    for (size_t k = 1; k < e.size(); ++k) itl.push_back((e[k] - e[k - 1]) * 1e3);
    if (e.size() > 1) tpot.push_back((e.back() - e[0]) * 1e3 / static_cast<double>(e.size() - 1));
  }
  row.ttft_p50_ms = Percentile(ttft, 0.5);
  row.ttft_p99_ms = Percentile(ttft, 0.99);
  row.itl_p50_ms = Percentile(itl, 0.5);
  row.itl_p99_ms = Percentile(itl, 0.99);
  row.tpot_p50_ms = Percentile(tpot, 0.5);
  row.achieved_rps = static_cast<double>(events.size()) / wall_s;
  return row;
}

// The open-loop load: `n` requests arriving as a Poisson process of `rate` per second
// (fixed seed, so every path gets the same arrivals), prompts of 8-32 random tokens,
// outputs of 16-128 tokens.
struct OpenLoad {
  Workload work;
  std::vector<double> arrival_s;
};

OpenLoad MakeOpenLoad(int n, double rate) {
  OpenLoad l{MakeLoad(n), {}};
  std::mt19937 rng(77);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (int i = 0; i < n; ++i) {
    l.arrival_s.push_back(t);
    t += gap(rng);
    l.work.outputs[i] = 16 + l.work.outputs[i] % 113;
  }
  return l;
}

// Calls send(i) at each request's arrival time, on this thread.
double RunArrivals(const OpenLoad& load, const std::function<void(int)>& send) {
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < load.arrival_s.size(); ++i) {
    // Pacing the load generator (not synchronisation): wait for the next arrival.
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(load.arrival_s[i])));
    send(static_cast<int>(i));
  }
  return Since(t0);
}

// Counts finished requests; Wait blocks until all have.
class Countdown {
 public:
  explicit Countdown(size_t n) : left_(n) {}
  void Done() {
    absl::MutexLock l(&mu_);
    --left_;
  }
  void Wait() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](size_t* left) { return *left == 0; }, &left_));
  }

 private:
  absl::Mutex mu_;
  size_t left_ ABSL_GUARDED_BY(mu_);
};

// The floor: the same arrivals handed to the (started) engine directly, timed in its
// output callbacks (no HTTP, no process hop).
LatencyRow OpenLoopEngine(Engine& e, const OpenLoad& load) {
  const size_t n = load.arrival_s.size();
  EventTimes events(n);
  std::vector<Clock::time_point> sent(n);
  Countdown countdown(n);
  const Clock::time_point t0 = Clock::now();
  RunArrivals(load, [&](int i) {
    sent[i] = Clock::now();
    auto id = e.AddRequest(load.work.prompts[i], Greedy(load.work.outputs[i]),
                           [&, i](const raio::llm::RequestOutput& o) {
                             if (!o.token_ids.empty()) events[i].push_back(Since(sent[i]));
                             if (o.finished) countdown.Done();
                           });
    if (!id.ok()) countdown.Done();
  });
  countdown.Wait();
  return Summarize(events, Since(t0));
}

std::string StreamBody(const std::vector<int>& prompt, int max_tokens) {
  return nlohmann::json({{"prompt", prompt},
                         {"max_tokens", max_tokens},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}})
      .dump();
}

// The same arrivals as streaming completions through the HTTP front at `port`: each
// request on its own thread and connection (the server closes a stream's connection at
// its end), timed from before connecting to each `data:` chunk.
LatencyRow OpenLoopHttp(int port, const OpenLoad& load) {
  const size_t n = load.arrival_s.size();
  EventTimes events(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  const Clock::time_point t0 = Clock::now();
  RunArrivals(load, [&](int i) {
    threads.emplace_back([&, i] {
      const Clock::time_point sent = Clock::now();
      auto c = raio::llm::bench::HttpClient::Connect("127.0.0.1", port);
      if (!c.ok()) return;
      auto t = (*c)->PostStream("/v1/completions",
                                StreamBody(load.work.prompts[i], load.work.outputs[i]), sent);
      if (!t.ok()) {
        std::fprintf(stderr, "request %d: %s\n", i, std::string(t.status().message()).c_str());
        return;
      }
      if (t->completion_tokens != load.work.outputs[i]) return;  // counted as failed
      events[i] = std::move(t->event_s);
    });
  });
  for (std::thread& t : threads) t.join();
  return Summarize(events, Since(t0));
}

// Median milliseconds per small request (prompt [1], one token), `n` in sequence.
double MedianMs(int n, const std::function<bool()>& one) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const Clock::time_point t = Clock::now();
    if (!one()) {
      std::fprintf(stderr, "a small request failed\n");
      std::exit(1);
    }
    ms.push_back(Since(t) * 1e3);
  }
  return Percentile(ms, 0.5);
}

double DirectSmallRequestMs(Engine& e, int n) {
  return MedianMs(n, [&] { return e.Generate({1}, Greedy(1)).ok(); });
}

// The same small request streamed: a new connection each (the server closes a stream's),
// timed to its first chunk.
double HttpSmallStreamFirstChunkMs(int port, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const Clock::time_point t0 = Clock::now();
    auto c = raio::llm::bench::HttpClient::Connect("127.0.0.1", port);
    if (!c.ok()) std::exit(1);
    auto t = (*c)->PostStream("/v1/completions", StreamBody({1}, 1), t0);
    if (!t.ok() || t->event_s.empty()) std::exit(1);
    ms.push_back(t->event_s[0] * 1e3);
  }
  return Percentile(ms, 0.5);
}

double HttpSmallRequestMs(int port, int n) {
  auto c = raio::llm::bench::HttpClient::Connect("127.0.0.1", port);
  if (!c.ok()) std::exit(1);
  const std::string body =
      nlohmann::json({{"prompt", {1}}, {"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}})
          .dump();
  return MedianMs(n, [&] { return (*c)->Post("/v1/completions", body).ok(); });
}

// Parts 1 and 2.
nlohmann::json ThroughputRows() {
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
  return {{"plain_decode_tok_s", plain}, {"engine_decode_tok_s", engine1}, {"concurrency", rows}};
}

void PrintLatency(const char* name, const LatencyRow& r, const LatencyRow* floor) {
  std::printf("  %-30s %8.2f   %8.2f   %7.2f   %7.2f   %8.3f   %6.1f", name, r.ttft_p50_ms,
              r.ttft_p99_ms, r.itl_p50_ms, r.itl_p99_ms, r.tpot_p50_ms, r.achieved_rps);
  if (floor != nullptr) {
    std::printf("   TTFT p50 %+.2f ms over the floor", r.ttft_p50_ms - floor->ttft_p50_ms);
  }
  if (r.failed > 0) std::printf("   (%d failed)", r.failed);
  std::printf("\n");
  std::fflush(stdout);
}

// Parts 3 and 4: the HTTP front, with the engine in this process and in a raio actor.
nlohmann::json HttpRows() {
  const int kRequests = 160, kSmall = 300;
  const double kRate = 16;
  const OpenLoad load = MakeOpenLoad(kRequests, kRate);
  const EngineConfig config{.max_num_seqs = 64, .enable_prefix_caching = false};
  std::printf(
      "\nopen loop, %d streaming requests, Poisson %.0f req/s, prompts 8-32, outputs 16-128 "
      "tokens\n"
      "                                 TTFT p50   TTFT p99   ITL p50   ITL p99   TPOT p50    "
      "req/s  (ms)\n",
      kRequests, kRate);
  auto engine = MakeEngine(config);
  engine->Start();
  raio::llm::LocalEngineClient local(engine.get());
  raio::llm::OpenAiServer server(&local, {.host = "127.0.0.1", .port = 0});
  absl::StatusOr<int> port = server.Start();
  if (!port.ok()) std::exit(1);
  const LatencyRow direct = OpenLoopEngine(*engine, load);
  PrintLatency("Engine direct (floor)", direct, nullptr);
  const LatencyRow http = OpenLoopHttp(*port, load);
  PrintLatency("HTTP, engine in-process", http, &direct);
  const double direct_ms = DirectSmallRequestMs(*engine, kSmall);
  const double http_ms = HttpSmallRequestMs(*port, kSmall);
  const double http_stream_ms = HttpSmallStreamFirstChunkMs(*port, kSmall);
  server.Stop();
  engine->Stop();
  engine.reset();

  // As `raio llm serve` runs by default: the engine in an actor on an embedded cluster.
  raio::Init(raio::InitOptions{});
  LatencyRow actor_http;
  double actor_ms = 0, actor_stream_ms = 0;
  {
    auto actor = raio::llm::ActorEngineClient::Create(
        {.model_dir = RAIO_LLM_MODEL_DIR, .lora_dir = {}, .engine = config, .torch_threads = 1});
    if (!actor.ok()) {
      std::fprintf(stderr, "%s\n", std::string(actor.status().message()).c_str());
      std::exit(1);
    }
    raio::llm::OpenAiServer actor_server(actor->get(), {.host = "127.0.0.1", .port = 0});
    absl::StatusOr<int> actor_port = actor_server.Start();
    if (!actor_port.ok()) std::exit(1);
    actor_http = OpenLoopHttp(*actor_port, load);
    PrintLatency("HTTP, engine in a raio actor", actor_http, &direct);
    actor_ms = HttpSmallRequestMs(*actor_port, kSmall);
    actor_stream_ms = HttpSmallStreamFirstChunkMs(*actor_port, kSmall);
    actor_server.Stop();
  }
  raio::Shutdown();

  std::printf(
      "\nHTTP front overhead: prompt [1], 1 token, non-streaming, keep-alive, median of %d\n"
      "                                 ms/request   over direct\n",
      kSmall);
  std::printf("  Engine::Generate (floor)       %9.3f\n", direct_ms);
  std::printf("  HTTP, engine in-process        %9.3f   %+9.3f   (Ray Serve reports 1-2 ms)\n",
              http_ms, http_ms - direct_ms);
  std::printf("  HTTP, engine in a raio actor   %9.3f   %+9.3f\n", actor_ms, actor_ms - direct_ms);
  std::printf("  streamed, to the first chunk (new connection each):\n");
  std::printf("  HTTP, engine in-process        %9.3f   %+9.3f\n", http_stream_ms,
              http_stream_ms - direct_ms);
  std::printf("  HTTP, engine in a raio actor   %9.3f   %+9.3f\n", actor_stream_ms,
              actor_stream_ms - direct_ms);
  return {{"rate_rps", kRate},
          {"requests", kRequests},
          {"engine_direct", direct.Json()},
          {"http_in_process", http.Json()},
          {"http_actor", actor_http.Json()},
          {"small_request_direct_ms", direct_ms},
          {"small_request_http_ms", http_ms},
          {"small_request_http_actor_ms", actor_ms},
          {"small_stream_first_chunk_http_ms", http_stream_ms},
          {"small_stream_first_chunk_http_actor_ms", actor_stream_ms}};
}

}  // namespace

int main(int argc, char** argv) {
  // The engine actor's worker process re-executes this binary: it runs the worker here.
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);
  const bool http_only = argc > 1 && std::strcmp(argv[1], "--http-only") == 0;
  raio::llm::SetTorchThreads(1);
  nlohmann::json out;
  if (!http_only) out = ThroughputRows();
  out["http"] = HttpRows();
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", std::gmtime(&now));
  std::filesystem::create_directories(RAIO_BENCH_SOURCE_DIR "/../results");
  std::ofstream(std::string(RAIO_BENCH_SOURCE_DIR "/../results/llm-") + stamp + ".json")
      << out.dump(2) << "\n";
  return 0;
}
