// The engine in a raio actor, so that the cluster places it by resources on any node:
// EngineActor lives in its own worker process (it loads the model there and runs the
// step thread), and ActorEngineClient is the EngineClient the HTTP front uses to reach it
// through actor calls (Submit / PollAll / Abort / Metrics). One poller thread of the
// client fetches the outputs of all its requests in one PollAll call at a time (waiting
// in the actor up to 100 ms for any) and hands them to per-request queues, so that
// delivery costs one round trip per batch of outputs rather than one per request and
// chunk. One client per actor: PollAll takes every request's outputs.
//
// The executable that starts the actor must call raio::Init(argc, argv) at the top of
// main (workers re-execute it; see raio/raio.h). Thread-safety: ActorEngineClient's
// methods may be called from any thread; EngineActor's run on the actor's threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "raio/llm/engine_client.h"
#include "raio/llm/model_dir.h"

namespace raio::llm {

struct ActorEngineOptions {
  std::string model_dir;
  std::string lora_dir;  // a PEFT LoRA adapter the actor merges into the weights; empty: none
  EngineConfig engine;
  int torch_threads = 1;
  // Held for the actor's lifetime; the engine's step thread keeps one CPU busy.
  std::map<std::string, double> resources = {{"CPU", 1}};
  // Times the actor is restarted (the model reloaded, on the same node) after its process
  // dies; -1: always. Requests in flight at the death fail; later ones go to the new one.
  int max_restarts = -1;
};

class ActorEngineClient : public EngineClient {
 public:
  // Creates the actor (raio must be initialized) and waits until its engine is built.
  // The model directory is also loaded here, for the tokenizer. The loaders' errors, or
  // Unavailable with the actor's failure.
  static absl::StatusOr<std::unique_ptr<ActorEngineClient>> Create(
      const ActorEngineOptions& options);
  ~ActorEngineClient() override;  // stops the poller, kills the actor

  absl::StatusOr<std::string> Submit(std::vector<int> prompt,
                                     const SamplingParams& params) override;
  absl::StatusOr<std::vector<RequestOutput>> Poll(const std::string& id,
                                                  absl::Duration wait) override;
  void Abort(const std::string& id) override;
  std::string Metrics() override;
  // A call to the actor, waiting up to 5 s (a restart reloads the model).
  absl::Status Health() override;
  const Tokenizer& tokenizer() const override { return *model_.tokenizer; }
  const std::string& model_name() const override { return model_.name; }
  int max_model_len() const override { return static_cast<int>(model_.weights.config.max_seq_len); }

 private:
  struct Handle;
  // A request's outputs, taken by the poller, not yet by Poll.
  struct Channel {
    std::vector<RequestOutput> outputs;
    bool finished = false;  // the finished output has arrived
  };
  ActorEngineClient(LoadedModel model, std::unique_ptr<Handle> handle);
  void PollLoop();
  bool PollerHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  LoadedModel model_;
  std::unique_ptr<Handle> handle_;
  absl::Mutex mu_;
  // By request id; created by Submit or by the poller, whichever comes first.
  std::unordered_map<std::string, std::shared_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
  // Aborted requests whose final output has not come yet (it is dropped when it does).
  std::unordered_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace raio::llm
