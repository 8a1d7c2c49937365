// raio::llm::Engine: continuous-batching LLM inference over a paged KV cache, after
// vLLM V1 (see scheduler.h, block_pool.h and docs/design/llm.md). Callers add requests
// (prompt token ids and sampling parameters) and get their output deltas through a
// callback; the engine runs one model forward per step over every scheduled request.
//
//   auto engine = Engine::Create(*LoadModelDir("models/stories260K"), {});
//   (*engine)->Start();
//   auto done = (*engine)->Generate((*engine)->tokenizer().Encode("Once"), params);
//
// Thread-safety: AddRequest, Abort, Generate, Stats and the accessors may be called from
// any thread. Started, the engine steps on its own thread; not started, the caller steps
// it with Step() (tests do, for determinism), from one thread at a time. Callbacks run on
// the stepping thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "raio/llm/engine_types.h"
#include "raio/llm/metrics.h"
#include "raio/llm/model_dir.h"

namespace raio::llm {

class LlamaModel;
namespace internal {
struct Request;
class Scheduler;
}  // namespace internal
class BlockPool;

struct EngineConfig {
  int max_num_seqs = 128;                      // running requests at most
  int max_num_batched_tokens = 2048;           // token budget of one step
  int64_t kv_cache_bytes = int64_t{64} << 20;  // KV cache pool size, bytes
  int block_size = 16;                         // tokens per KV cache block
  bool enable_prefix_caching = true;
  int max_queued_requests = 1024;  // unfinished requests beyond max_num_seqs
  std::string device = "cpu";      // torch device ("cpu", "cuda:0", ...)
  bool static_batching = false;    // benchmark baseline, see SchedulerConfig
};

// A finished request's whole output (Engine::Generate).
struct Completion {
  std::vector<int> token_ids;
  std::vector<SampledToken> logprobs;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;
};

struct EngineStats {
  int running = 0, waiting = 0;
  int num_blocks = 0, free_blocks = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // in blocks
};

class Engine {
 public:
  // Builds the model on `config.device` with a pool of kv_cache_bytes / block bytes
  // blocks. InvalidArgument on a bad config (or a pool smaller than one full-length
  // sequence); the model's errors otherwise.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(LoadedModel model,
                                                        const EngineConfig& config);
  ~Engine();  // Stop()

  // Starts the step thread. Idempotent.
  void Start();
  // Refuses new requests, finishes every unfinished one with kAbort and joins the step
  // thread. Idempotent; blocks for at most one step.
  void Stop();

  // Queues a request and returns its id. The callback gets its outputs (see
  // OutputCallback). InvalidArgument (message as vLLM's) on an empty prompt, a token id
  // outside the vocabulary, bad params, or prompt + max_tokens over the context length;
  // ResourceExhausted when max_num_seqs + max_queued_requests requests are unfinished;
  // FailedPrecondition after Stop. Never blocks on the model.
  absl::StatusOr<std::string> AddRequest(std::vector<int> prompt, const SamplingParams& params,
                                         OutputCallback on_output);
  // Cancels a request: at the next step boundary it leaves the queues, its blocks are
  // freed and its callback gets a final kAbort output. Unknown ids are ignored.
  void Abort(const std::string& request_id);
  // Runs one step on the calling thread (only while not started): admits queued
  // requests, schedules, runs the model, samples, delivers. Returns whether any request
  // is still unfinished.
  bool Step();
  // Adds a request and blocks until it finishes (stepping itself when not started).
  absl::StatusOr<Completion> Generate(std::vector<int> prompt, const SamplingParams& params);

  EngineStats Stats() const;
  const EngineMetrics& metrics() const { return metrics_; }
  const Tokenizer& tokenizer() const { return *model_.tokenizer; }
  const ModelConfig& model_config() const { return model_.weights.config; }
  const std::string& model_name() const { return model_.name; }
  const EngineConfig& config() const { return config_; }

 private:
  Engine(LoadedModel model, const EngineConfig& config);
  void Run();
  void DrainInbox();
  void ProcessToken(internal::Request& r, const SampledToken& s, FinishReason* finish);
  void Deliver(internal::Request& r, FinishReason finish, const absl::Status& error);
  void Finish(internal::Request& r, FinishReason finish, const absl::Status& error);

  LoadedModel model_;
  EngineConfig config_;
  std::unique_ptr<LlamaModel> runtime_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<internal::Scheduler> scheduler_;
  EngineMetrics metrics_;
  std::atomic<int> unfinished_{0};
  std::string id_prefix_;  // "req-<8 random hex digits>-", then a counter
  std::atomic<uint64_t> next_id_{0};

  // Step-thread state.
  int64_t stats_preemptions_ = 0;
  std::unordered_map<std::string, std::unique_ptr<internal::Request>> requests_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::unique_ptr<internal::Request>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> aborts_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace raio::llm
