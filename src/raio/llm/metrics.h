// The engine's metrics under vLLM's names, rendered in the Prometheus text format for
// `GET /metrics` (label model_name). Thread-safety: every method may be called from any
// thread (one mutex; no I/O under it).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace raio::llm {

class EngineMetrics {
 public:
  // Gauges, set by the engine after each step.
  void SetQueues(int running, int waiting, double kv_cache_usage);
  void AddPromptTokens(int64_t n);
  void AddGenerationTokens(int64_t n);
  void AddPreemptions(int64_t n);
  // Prefix cache lookups and hits so far, in tokens (totals, not increments).
  void SetPrefixCache(int64_t queries, int64_t hits);
  void RequestFinished(const std::string& reason);
  // Latencies in seconds.
  void ObserveTimeToFirstToken(double s);
  void ObserveTimePerOutputToken(double s);
  void ObserveE2eLatency(double s);
  void ObserveQueueTime(double s);

  int running() const;
  int waiting() const;
  // Prometheus text exposition of every metric, labelled model_name="<model_name>".
  std::string Render(const std::string& model_name) const;

 private:
  struct Histogram {
    std::vector<double> bounds;    // upper bounds, seconds
    std::vector<uint64_t> counts;  // per bucket (not cumulative)
    double sum = 0;
    uint64_t count = 0;
    void Observe(double v);
  };
  static Histogram MakeHistogram(std::vector<double> bounds);

  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  double kv_usage_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefix_queries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefix_hits_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> success_ ABSL_GUARDED_BY(mu_);
  Histogram ttft_ ABSL_GUARDED_BY(mu_) = MakeHistogram({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                        0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10});
  Histogram tpot_ ABSL_GUARDED_BY(mu_) = MakeHistogram({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                        0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                        0.75, 1.0, 2.5});
  Histogram e2e_ ABSL_GUARDED_BY(mu_) = MakeHistogram({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2,
                                                       2.5, 5, 10, 15, 20, 30, 60});
  Histogram queue_ ABSL_GUARDED_BY(mu_) = MakeHistogram({0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5,
                                                         5, 10, 30, 60});
};

}  // namespace raio::llm
