// A standalone check of the LLM runtime on a GPU (not part of the CMake build: Debian's
// libtorch is CPU-only; tests/llm/cuda_check.sh builds it against a CUDA libtorch).
// Compares, on the bundled stories260K model:
//   1. the batched forward (five sequences, chunks of different sizes, scattered block
//      tables) on cpu (loop kernels), cpu (generic ops) and cuda, float32 and float64,
//      with the plain double reference and with each other;
//   2. greedy decoding from BOS on cuda with the documented text;
//   3. the engine on cuda with the engine on cpu: 32 requests batched, chunked prefill,
//      preemption, prefix-cache hits, and a started engine with concurrent Generate calls;
//   4. the error paths: a GPU index CUDA does not see, a KV cache larger than the GPU;
//   5. throughput of the engine on cpu and cuda (greedy, batches of 1, 64 and 256).
// Prints one line per check and "CUDA CHECK: ALL PASSED" or "... FAILED"; exits 0 or 1.
// Without CUDA (a CPU-only libtorch) it runs the cpu parts and says the rest was skipped.
//
//   cuda_check MODEL_DIR [DEVICE]   (DEVICE: cuda:0 by default)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "raio/llm/engine.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "reference_llama.h"

namespace raio::llm {
namespace {

int g_failures = 0;
std::string g_dir;

void Check(bool ok, const std::string& what) {
  std::printf("[%s] %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The llama2.c layout with its llama2.c tokenizer (no SentencePiece shim needed).
LoadedModel Load() {
  LoadedModel m;
  m.layout = ModelLayout::kLlama2c;
  m.name = "stories260K";
  auto w = LoadLlama2cCheckpoint(g_dir + "/stories260K.bin");
  if (!w.ok()) {
    std::printf("cannot load weights: %s\n", std::string(w.status().message()).c_str());
    std::exit(2);
  }
  m.weights = *std::move(w);
  auto t = LoadLlama2cTokenizer(g_dir + "/tok512.bin");
  if (!t.ok()) {
    std::printf("cannot load tokenizer: %s\n", std::string(t.status().message()).c_str());
    std::exit(2);
  }
  m.tokenizer = *std::move(t);
  return m;
}

constexpr const char* kKnownGreedyText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high";

// --- 1. batched forward -------------------------------------------------------------------

struct Schedule {
  std::vector<std::vector<int>> seqs, tables;
  std::vector<int> lengths = {37, 1, 20, 64, 9, 130, 3};
  std::vector<int> chunk = {5, 1, 20, 7, 1, 50, 3};
};

Schedule MakeSchedule() {
  const int kBlock = 16;
  Schedule s;
  std::mt19937 rng(7);
  std::vector<int> perm(64);
  for (int i = 0; i < 64; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  int next_block = 0;
  for (int len : s.lengths) {
    std::vector<int> q = {1};
    for (int i = 1; i < len; ++i) q.push_back(static_cast<int>(rng() % 512));
    s.seqs.push_back(q);
    std::vector<int> t;
    for (int b = 0; b * kBlock < len; ++b) t.push_back(perm[next_block++]);
    s.tables.push_back(t);
  }
  return s;
}

// Every logit row the model returns over the schedule, in order; empty on error.
std::vector<std::vector<float>> RunSchedule(const ModelWeights& w, const Schedule& s,
                                            const LlamaModel::Options& o, std::string* err) {
  auto m = LlamaModel::Create(w, o);
  if (!m.ok()) {
    *err = std::string(m.status().message());
    return {};
  }
  std::vector<std::vector<float>> rows;
  std::vector<int> done(s.seqs.size(), 0);
  while (true) {
    std::vector<SequenceChunk> batch;
    for (size_t i = 0; i < s.seqs.size(); ++i) {
      if (done[i] >= s.lengths[i]) continue;
      int n = std::min(s.chunk[i], s.lengths[i] - done[i]);
      batch.push_back({std::span<const int>(s.seqs[i]).subspan(done[i], n), done[i], s.tables[i]});
      done[i] += n;
    }
    if (batch.empty()) break;
    auto logits = (*m)->Forward(batch);
    if (!logits.ok()) {
      *err = std::string(logits.status().message());
      return {};
    }
    for (size_t b = 0; b < batch.size(); ++b) {
      rows.emplace_back(logits->begin() + b * 512, logits->begin() + (b + 1) * 512);
    }
  }
  return rows;
}

// The double reference's rows over the same schedule.
std::vector<std::vector<float>> ReferenceRows(const ModelWeights& w, const Schedule& s) {
  std::vector<testing::ReferenceLlamaT<double>> refs;
  for (size_t i = 0; i < s.seqs.size(); ++i) refs.emplace_back(w);
  std::vector<std::vector<float>> rows;
  std::vector<int> done(s.seqs.size(), 0);
  while (true) {
    bool any = false;
    for (size_t i = 0; i < s.seqs.size(); ++i) {
      if (done[i] >= s.lengths[i]) continue;
      any = true;
      int n = std::min(s.chunk[i], s.lengths[i] - done[i]);
      const std::vector<double>* want = nullptr;
      for (int k = 0; k < n; ++k) want = &refs[i].Forward(s.seqs[i][done[i] + k], done[i] + k);
      rows.emplace_back(want->begin(), want->end());
      done[i] += n;
    }
    if (!any) break;
  }
  return rows;
}

// Largest |a - b| / max(1, |b|) and largest |a - b|.
std::pair<double, double> Diff(const std::vector<std::vector<float>>& a,
                               const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return {INFINITY, INFINITY};
  double rel = 0, abs_ = 0;
  for (size_t r = 0; r < a.size(); ++r) {
    for (size_t v = 0; v < a[r].size(); ++v) {
      double d = std::abs(double{a[r][v]} - b[r][v]);
      abs_ = std::max(abs_, d);
      rel = std::max(rel, d / std::max(1.0, std::abs(double{b[r][v]})));
    }
  }
  return {rel, abs_};
}

void CheckForward(const ModelWeights& w, const std::string& dev, bool have_cuda) {
  Schedule s = MakeSchedule();
  auto ref = ReferenceRows(w, s);
  struct Variant {
    std::string name;
    LlamaModel::Options o;
    double tol;
  };
  std::vector<Variant> variants = {
      {"cpu f32 loop kernels", {.device = "cpu", .num_blocks = 64}, 5e-5},
      {"cpu f32 generic ops", {.device = "cpu", .num_blocks = 64, .generic_ops = true}, 5e-5},
      {"cpu f64 generic ops",
       {.device = "cpu", .num_blocks = 64, .float64 = true, .generic_ops = true},
       1e-5},
  };
  if (have_cuda) {
    variants.push_back({dev + " f32", {.device = dev, .num_blocks = 64}, 5e-5});
    variants.push_back({dev + " f64", {.device = dev, .num_blocks = 64, .float64 = true}, 1e-5});
  }
  std::map<std::string, std::vector<std::vector<float>>> got;
  for (const Variant& v : variants) {
    std::string err;
    double t0 = Now();
    auto rows = RunSchedule(w, s, v.o, &err);
    double t1 = Now();
    if (rows.empty()) {
      Check(false, "forward " + v.name + ": " + err);
      continue;
    }
    auto [rel, abs_] = Diff(rows, ref);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "forward %s vs double reference: %zu rows, max rel diff %.3g, max abs diff "
                  "%.3g (tolerance %.0g rel; %.1f ms)",
                  v.name.c_str(), rows.size(), rel, abs_, v.tol, (t1 - t0) * 1e3);
    Check(rel < v.tol, buf);
    got[v.name] = std::move(rows);
  }
  if (have_cuda && got.count(dev + " f32") && got.count("cpu f32 loop kernels")) {
    auto [rel, abs_] = Diff(got[dev + " f32"], got["cpu f32 loop kernels"]);
    auto [rel2, abs2] = Diff(got[dev + " f32"], got["cpu f32 generic ops"]);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "logits %s f32 vs cpu f32: max abs diff %.3g (loop kernels), %.3g (generic "
                  "ops)",
                  dev.c_str(), abs_, abs2);
    Check(rel < 5e-5 && rel2 < 5e-5, buf);
  }
}

// --- 2. greedy from BOS --------------------------------------------------------------------

std::vector<int> GreedyFromBos(LlamaModel& m, int steps) {
  std::vector<int> table(m.num_blocks());
  for (int i = 0; i < m.num_blocks(); ++i) table[i] = i;
  std::vector<int> tokens = {1};
  for (int pos = 0; pos < steps; ++pos) {
    SequenceChunk chunk{std::span<const int>(&tokens[pos], 1), pos, table};
    auto logits = m.Forward(std::span<const SequenceChunk>(&chunk, 1));
    if (!logits.ok()) return {};
    tokens.push_back(
        static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin()));
  }
  return std::vector<int>(tokens.begin() + 1, tokens.end());
}

void CheckGreedy(const LoadedModel& lm, const std::string& dev) {
  auto cpu = LlamaModel::Create(lm.weights, {.device = "cpu", .num_blocks = 32});
  auto gpu = LlamaModel::Create(lm.weights, {.device = dev, .num_blocks = 32});
  if (!gpu.ok()) {
    Check(false, "greedy: create on " + dev + ": " + std::string(gpu.status().message()));
    return;
  }
  auto a = GreedyFromBos(**cpu, 400), b = GreedyFromBos(**gpu, 400);
  std::string text = lm.tokenizer->Decode(b, 1);
  Check(text.substr(0, strlen(kKnownGreedyText)) == kKnownGreedyText,
        "greedy from BOS on " + dev + " gives the documented text: \"" + text.substr(0, 80) +
            "...\"");
  size_t same = 0;
  while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
  Check(!b.empty() && a == b, "greedy from BOS, 400 tokens: cpu and " + dev + " agree on " +
                                  std::to_string(same) + " of " + std::to_string(a.size()));
}

// --- 3. engine -----------------------------------------------------------------------------

SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

struct Case {
  std::vector<int> prompt;
  int max_tokens;
};

std::vector<Case> Cases(const Tokenizer& tok) {
  const char* words[] = {"Once upon a time", "Tom had a dog", "The sun was hot",
                         "Lily and Ben",     "A little bird", "One day, a cat"};
  std::vector<Case> out;
  std::vector<int> shared = tok.Encode("Once upon a time, there was a big tree in the park.");
  for (int i = 0; i < 32; ++i) {
    std::vector<int> p = {1};
    if (i < 16) p.insert(p.end(), shared.begin(), shared.end());
    for (int k = 0; k <= i % 4; ++k) {
      std::vector<int> w = tok.Encode(words[(i + k) % 6]);
      p.insert(p.end(), w.begin(), w.end());
    }
    out.push_back({p, 8 + (i * 37) % 90});
  }
  return out;
}

std::unique_ptr<Engine> MakeEngine(EngineConfig config, std::string* err) {
  auto e = Engine::Create(Load(), config);
  if (!e.ok()) {
    *err = std::string(e.status().message());
    return nullptr;
  }
  return *std::move(e);
}

// Adds every case at once and steps until all finish.
std::vector<std::vector<int>> RunBatched(Engine& e, const std::vector<Case>& cases,
                                         std::string* err) {
  std::vector<std::vector<int>> out(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    auto id = e.AddRequest(cases[i].prompt, Greedy(cases[i].max_tokens),
                           [&out, err, i](const RequestOutput& o) {
                             out[i].insert(out[i].end(), o.token_ids.begin(), o.token_ids.end());
                             if (!o.error.ok()) *err = std::string(o.error.message());
                           });
    if (!id.ok()) *err = std::string(id.status().message());
  }
  while (e.Step()) {
  }
  return out;
}

std::string CompareOutputs(const std::vector<std::vector<int>>& got,
                           const std::vector<std::vector<int>>& want) {
  int same = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) {
      ++same;
    } else if (first.empty()) {
      size_t k = 0;
      while (k < got[i].size() && k < want[i].size() && got[i][k] == want[i][k]) ++k;
      first = "; first difference: request " + std::to_string(i) + " at token " +
              std::to_string(k) + " of " + std::to_string(want[i].size());
    }
  }
  return std::to_string(same) + "/" + std::to_string(want.size()) + " requests equal" + first;
}

void CheckEngine(const std::string& dev) {
  LoadedModel lm = Load();
  auto cases = Cases(*lm.tokenizer);
  std::string err;
  auto cpu_engine = MakeEngine({.enable_prefix_caching = false}, &err);
  auto want = RunBatched(*cpu_engine, cases, &err);
  Check(err.empty(), "engine cpu: 32 requests batched " + err);
  constexpr int64_t kBlockBytes = 2 * 5 * 16 * 32 * 4;
  struct Variant {
    std::string name;
    EngineConfig config;
  };
  std::vector<Variant> variants = {
      {"batched", {.enable_prefix_caching = false, .device = dev}},
      {"7-token budget (chunked prefill)",
       {.max_num_batched_tokens = 7, .enable_prefix_caching = false, .device = dev}},
      {"32-block pool (preemption)",
       {.kv_cache_bytes = 32 * kBlockBytes, .enable_prefix_caching = false, .device = dev}},
      {"prefix caching, second pass", {.device = dev}},
  };
  for (const Variant& v : variants) {
    err.clear();
    auto e = MakeEngine(v.config, &err);
    if (!e) {
      Check(false, "engine " + dev + " " + v.name + ": " + err);
      continue;
    }
    auto got = RunBatched(*e, cases, &err);
    std::string extra;
    if (v.name.starts_with("prefix")) {
      got = RunBatched(*e, cases, &err);
      extra = ", prefix cache hits " + std::to_string(e->Stats().prefix_cache_hits) + " blocks";
    }
    if (v.name.find("preemption") != std::string::npos) {
      extra = ", " + std::to_string(e->Stats().num_preemptions) + " preemptions";
    }
    Check(err.empty() && got == want, "engine " + dev + " " + v.name +
                                          " vs cpu: " + CompareOutputs(got, want) + extra +
                                          (err.empty() ? "" : " error: " + err));
  }
  // A started engine, 8 threads calling Generate at once.
  err.clear();
  auto e = MakeEngine({.device = dev}, &err);
  if (!e) {
    Check(false, "engine " + dev + " started: " + err);
    return;
  }
  e->Start();
  std::vector<std::vector<int>> got(cases.size());
  std::vector<std::string> errs(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases.size(); i += 8) {
        auto r = e->Generate(cases[i].prompt, Greedy(cases[i].max_tokens));
        if (!r.ok()) {
          errs[t] = std::string(r.status().message());
          continue;
        }
        got[i] = r->token_ids;
      }
    });
  }
  for (auto& t : threads) t.join();
  e->Stop();
  std::string all_errs;
  for (auto& s : errs) all_errs += s;
  Check(all_errs.empty() && got == want,
        "engine " + dev + " started, 8 threads x Generate vs cpu: " + CompareOutputs(got, want) +
            all_errs);
}

// --- 4. errors -----------------------------------------------------------------------------

void CheckErrors(const ModelWeights& w) {
  try {
    auto m = LlamaModel::Create(w, {.device = "cuda:63", .num_blocks = 4});
    Check(!m.ok(), "Create on cuda:63 is an error status: " +
                       (m.ok() ? std::string("ok?") : std::string(m.status().message())));
  } catch (const std::exception& e) {
    Check(false, std::string("Create on cuda:63 threw: ") + e.what());
  }
  try {
    // 100M blocks: 200 GB per layer cache tensor, more than the GPU holds.
    auto m = LlamaModel::Create(w, {.device = "cuda:0", .num_blocks = 100'000'000});
    std::string msg = m.ok() ? std::string("ok?") : std::string(m.status().message());
    Check(!m.ok(), "Create with a 2 TB KV cache is an error status: " + msg.substr(0, 160));
  } catch (const std::exception& e) {
    Check(false, std::string("Create with a 2 TB KV cache threw: ") +
                     std::string(e.what()).substr(0, 300));
  }
}

// --- 5. throughput -------------------------------------------------------------------------

void Throughput(const std::string& dev, const Tokenizer& tok) {
  std::vector<int> prompt = {1};
  for (int t : tok.Encode("Once upon a time")) prompt.push_back(t);
  for (int n : {1, 64, 256}) {
    std::string err;
    auto e = MakeEngine({.max_num_seqs = 256, .enable_prefix_caching = false, .device = dev}, &err);
    if (!e) {
      std::printf("throughput %s: %s\n", dev.c_str(), err.c_str());
      return;
    }
    e->Generate(prompt, Greedy(8)).IgnoreError();  // warm-up
    const int kTokens = 128;
    std::vector<Case> cases(n, Case{prompt, kTokens});
    double t0 = Now();
    auto out = RunBatched(*e, cases, &err);
    double t1 = Now();
    size_t total = 0;
    for (auto& o : out) total += o.size();
    std::printf("throughput %-6s batch %3d x %d tokens: %8.0f tokens/s (%.3f s, %.2f ms/step)\n",
                dev.c_str(), n, kTokens, total / (t1 - t0), t1 - t0, (t1 - t0) * 1e3 / kTokens);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace raio::llm

int main(int argc, char** argv) {
  using namespace raio::llm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [DEVICE]\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  const std::string dev = argc > 2 ? argv[2] : "cuda:0";
  SetTorchThreads(1);
  LoadedModel lm = Load();
  auto probe = LlamaModel::Create(lm.weights, {.device = dev, .num_blocks = 4});
  const bool have_cuda = probe.ok();
  std::printf("device %s: %s\n", dev.c_str(),
              have_cuda ? "available" : std::string(probe.status().message()).c_str());
  probe = absl::InternalError("released");
  CheckForward(lm.weights, dev, have_cuda);
  if (have_cuda) {
    CheckGreedy(lm, dev);
    CheckEngine(dev);
    CheckErrors(lm.weights);
  }
  Throughput("cpu", *lm.tokenizer);
  if (have_cuda) Throughput(dev, *lm.tokenizer);
  if (!have_cuda) std::printf("CUDA parts skipped: no CUDA\n");
  std::printf("CUDA CHECK: %s (%d failures)\n", g_failures ? "FAILED" : "ALL PASSED", g_failures);
  return g_failures ? 1 : 0;
}
