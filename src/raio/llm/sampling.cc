#include "raio/llm/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace raio::llm {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError("temperature must be a number >= 0");
  }
  if (!(top_p > 0 && top_p <= 1)) return absl::InvalidArgumentError("top_p must be in (0, 1]");
  if (top_k < -1) return absl::InvalidArgumentError("top_k must be -1 (off) or >= 0");
  if (max_tokens <= 0) return absl::InvalidArgumentError("max_tokens must be at least 1");
  if (logprobs && (*logprobs < 0 || *logprobs > 20)) {
    return absl::InvalidArgumentError("logprobs must be between 0 and 20");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return absl::InvalidArgumentError("stop strings must not be empty");
  }
  return absl::OkStatus();
}

SampledToken Sample(std::span<const float> logits, const SamplingParams& params,
                    std::mt19937_64& rng) {
  const int n = static_cast<int>(logits.size());
  SampledToken out;
  if (params.temperature == 0) {
    out.token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[a] > logits[b]; });
    int keep = params.top_k > 0 ? std::min(params.top_k, n) : n;
    std::vector<double> p(keep);
    const double mx = logits[order[0]] / params.temperature;
    double sum = 0;
    for (int i = 0; i < keep; ++i)
      sum += (p[i] = std::exp(logits[order[i]] / params.temperature - mx));
    if (params.top_p < 1) {
      double acc = 0;
      for (int i = 0; i < keep; ++i) {
        acc += p[i] / sum;
        if (acc >= params.top_p) {
          keep = i + 1;
          break;
        }
      }
      sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
    }
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * sum;
    out.token = order[keep - 1];
    for (int i = 0; i < keep; ++i) {
      if ((u -= p[i]) < 0) {
        out.token = order[i];
        break;
      }
    }
  }
  if (params.logprobs) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    const double log_z = mx + std::log(sum);
    out.logprob = static_cast<float>(logits[out.token] - log_z);
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min(*params.logprobs, n);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) {
      out.top.push_back({order[i], static_cast<float>(logits[order[i]] - log_z)});
    }
  }
  return out;
}

}  // namespace raio::llm
