// The engine in a raio actor, so that the cluster places it by resources on any node:
// EngineActor lives in its own worker process (it loads the model there and runs the
// step thread), and ActorEngineClient is the EngineClient the HTTP front uses to reach it
// through actor calls (Submit / Poll / Abort / Metrics; Poll waits in the actor up to a
// deadline, so the actor allows many concurrent calls).
//
// The executable that starts the actor must call raio::Init(argc, argv) at the top of
// main (workers re-execute it; see raio/raio.h). Thread-safety: ActorEngineClient's
// methods may be called from any thread; EngineActor's run on the actor's threads.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "raio/llm/engine_client.h"
#include "raio/llm/model_dir.h"

namespace raio::llm {

struct ActorEngineOptions {
  std::string model_dir;
  EngineConfig engine;
  int torch_threads = 1;
  // Held for the actor's lifetime; the engine's step thread keeps one CPU busy.
  std::map<std::string, double> resources = {{"CPU", 1}};
};

class ActorEngineClient : public EngineClient {
 public:
  // Creates the actor (raio must be initialized) and waits until its engine is built.
  // The model directory is also loaded here, for the tokenizer. The loaders' errors, or
  // Unavailable with the actor's failure.
  static absl::StatusOr<std::unique_ptr<ActorEngineClient>> Create(
      const ActorEngineOptions& options);
  ~ActorEngineClient() override;  // kills the actor

  absl::StatusOr<std::string> Submit(std::vector<int> prompt,
                                     const SamplingParams& params) override;
  absl::StatusOr<std::vector<RequestOutput>> Poll(const std::string& id,
                                                  absl::Duration wait) override;
  void Abort(const std::string& id) override;
  std::string Metrics() override;
  const Tokenizer& tokenizer() const override { return *model_.tokenizer; }
  const std::string& model_name() const override { return model_.name; }
  int max_model_len() const override { return static_cast<int>(model_.weights.config.max_seq_len); }

 private:
  struct Handle;
  ActorEngineClient(LoadedModel model, std::unique_ptr<Handle> handle);
  LoadedModel model_;
  std::unique_ptr<Handle> handle_;
};

}  // namespace raio::llm
