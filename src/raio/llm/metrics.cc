#include "raio/llm/metrics.h"

#include "absl/strings/str_cat.h"

namespace raio::llm {

EngineMetrics::Histogram EngineMetrics::MakeHistogram(std::vector<double> bounds) {
  Histogram h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void EngineMetrics::Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

void EngineMetrics::SetQueues(int running, int waiting, double kv_cache_usage) {
  absl::MutexLock l(&mu_);
  running_ = running;
  waiting_ = waiting;
  kv_usage_ = kv_cache_usage;
}
void EngineMetrics::AddPromptTokens(int64_t n) {
  absl::MutexLock l(&mu_);
  prompt_tokens_ += n;
}
void EngineMetrics::AddGenerationTokens(int64_t n) {
  absl::MutexLock l(&mu_);
  generation_tokens_ += n;
}
void EngineMetrics::AddPreemptions(int64_t n) {
  absl::MutexLock l(&mu_);
  preemptions_ += n;
}
void EngineMetrics::SetPrefixCache(int64_t queries, int64_t hits) {
  absl::MutexLock l(&mu_);
  prefix_queries_ = queries;
  prefix_hits_ = hits;
}
void EngineMetrics::RequestFinished(const std::string& reason) {
  absl::MutexLock l(&mu_);
  ++success_[reason];
}
void EngineMetrics::ObserveTimeToFirstToken(double s) {
  absl::MutexLock l(&mu_);
  ttft_.Observe(s);
}
void EngineMetrics::ObserveTimePerOutputToken(double s) {
  absl::MutexLock l(&mu_);
  tpot_.Observe(s);
}
void EngineMetrics::ObserveE2eLatency(double s) {
  absl::MutexLock l(&mu_);
  e2e_.Observe(s);
}
void EngineMetrics::ObserveQueueTime(double s) {
  absl::MutexLock l(&mu_);
  queue_.Observe(s);
}
int EngineMetrics::running() const {
  absl::MutexLock l(&mu_);
  return running_;
}
int EngineMetrics::waiting() const {
  absl::MutexLock l(&mu_);
  return waiting_;
}

std::string EngineMetrics::Render(const std::string& model_name) const {
  absl::MutexLock l(&mu_);
  const std::string label = absl::StrCat("model_name=\"", model_name, "\"");
  std::string out;
  auto scalar = [&](const char* name, const char* type, const char* help, double v) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, "{",
                    label, "} ", v, "\n");
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
    uint64_t cum = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cum += h.counts[i];
      std::string le = i < h.bounds.size() ? absl::StrCat(h.bounds[i]) : "+Inf";
      absl::StrAppend(&out, name, "_bucket{", label, ",le=\"", le, "\"} ", cum, "\n");
    }
    absl::StrAppend(&out, name, "_sum{", label, "} ", h.sum, "\n", name, "_count{", label, "} ",
                    h.count, "\n");
  };
  scalar("vllm:num_requests_running", "gauge", "Requests in the running batch.", running_);
  scalar("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", waiting_);
  scalar("vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 1 = all blocks in use.", kv_usage_);
  scalar("vllm:prompt_tokens_total", "counter", "Prompt tokens processed.", prompt_tokens_);
  scalar("vllm:generation_tokens_total", "counter", "Tokens generated.", generation_tokens_);
  scalar("vllm:num_preemptions_total", "counter", "Preemptions by recompute.", preemptions_);
  scalar("vllm:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.", static_cast<double>(prefix_queries_));
  scalar("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         static_cast<double>(prefix_hits_));
  absl::StrAppend(&out, "# HELP vllm:request_success_total Finished requests.\n",
                  "# TYPE vllm:request_success_total counter\n");
  for (const auto& [reason, n] : success_) {
    absl::StrAppend(&out, "vllm:request_success_total{", label, ",finished_reason=\"", reason,
                    "\"} ", n, "\n");
  }
  histogram("vllm:time_to_first_token_seconds", "Time to first token.", ttft_);
  histogram("vllm:time_per_output_token_seconds", "Time between output tokens.", tpot_);
  histogram("vllm:inter_token_latency_seconds", "Time between output tokens.", tpot_);
  histogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to finish.", e2e_);
  histogram("vllm:request_queue_time_seconds", "Time waiting before first scheduled.", queue_);
  return out;
}

}  // namespace raio::llm
