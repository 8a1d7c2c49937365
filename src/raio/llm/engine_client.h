// What the HTTP front needs of an engine, as a pull interface: submit a request, poll its
// output deltas, abort it, read metrics. Two implementations: LocalEngineClient over an
// in-process Engine, and ActorEngineClient (engine_actor.h) over an Engine living in a
// raio actor, placed by the cluster on a node with the resources it asks for.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "raio/llm/engine.h"

namespace raio::llm {

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Queues a request; the engine's errors (InvalidArgument, ResourceExhausted, ...).
  virtual absl::StatusOr<std::string> Submit(std::vector<int> prompt,
                                             const SamplingParams& params) = 0;
  // The request's outputs since the last call, waiting up to `wait` for at least one
  // (empty when none came). After the finished output has been returned the id is
  // forgotten: NotFound.
  virtual absl::StatusOr<std::vector<RequestOutput>> Poll(const std::string& id,
                                                          absl::Duration wait) = 0;
  // Cancels the request (its blocks are freed at the engine's next step).
  virtual void Abort(const std::string& id) = 0;
  // Prometheus text of the engine's metrics.
  virtual std::string Metrics() = 0;
  // OK while the engine can take requests; Unavailable (with the cause) when it is gone,
  // e.g. its actor's process died and it has not (yet) restarted. Blocks at most a few
  // seconds.
  virtual absl::Status Health() = 0;

  virtual const Tokenizer& tokenizer() const = 0;
  virtual const std::string& model_name() const = 0;
  virtual int max_model_len() const = 0;
};

// Over an Engine in this process (which must outlive it and be started).
class LocalEngineClient : public EngineClient {
 public:
  explicit LocalEngineClient(Engine* engine) : engine_(engine) {}

  absl::StatusOr<std::string> Submit(std::vector<int> prompt,
                                     const SamplingParams& params) override;
  absl::StatusOr<std::vector<RequestOutput>> Poll(const std::string& id,
                                                  absl::Duration wait) override;
  void Abort(const std::string& id) override;
  std::string Metrics() override;
  absl::Status Health() override { return absl::OkStatus(); }
  const Tokenizer& tokenizer() const override { return engine_->tokenizer(); }
  const std::string& model_name() const override { return engine_->model_name(); }
  int max_model_len() const override {
    return static_cast<int>(engine_->model_config().max_seq_len);
  }

 private:
  struct Channel {
    absl::Mutex mu;
    std::vector<RequestOutput> outputs ABSL_GUARDED_BY(mu);
  };
  Engine* engine_;
  absl::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace raio::llm
