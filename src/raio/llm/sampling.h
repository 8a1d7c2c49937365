// Per-request sampling parameters (OpenAI / vLLM names) and the sampler that turns one
// row of logits into a token: temperature, top-k, top-p (nucleus), a per-request seeded
// generator, and log-probabilities.
// Thread-safety: SamplingParams is a value; Sample is a pure function of its arguments
// (the generator is the caller's, one per request).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace raio::llm {

struct SamplingParams {
  double temperature = 1.0;         // 0: greedy (argmax); must be >= 0
  double top_p = 1.0;               // nucleus mass in (0, 1]
  int top_k = -1;                   // keep the k most likely tokens; -1 or 0: all
  std::optional<uint64_t> seed;     // per-request generator seed; unset: random
  int max_tokens = 16;              // generated tokens, >= 1
  std::vector<std::string> stop;    // stop strings (not included in the text)
  std::vector<int> stop_token_ids;  // extra stop tokens (included in the count)
  bool ignore_eos = false;          // keep going past EOS / BOS
  std::optional<int> logprobs;      // return the chosen token's logprob and this many
                                    // top alternatives (0..20)

  // InvalidArgument naming the field when a value is outside the ranges above.
  [[nodiscard]] absl::Status Validate() const;
};

struct TokenLogprob {
  int token = 0;
  float logprob = 0;  // natural log of the model's probability (before temperature)
};

struct SampledToken {
  int token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // `logprobs` most likely tokens, best first
};

// Samples from `logits` [vocab] float32. Greedy takes the first maximum; otherwise the
// logits are divided by the temperature, restricted to the top_k most likely tokens and
// then to the smallest set whose probability reaches top_p, renormalised, and sampled
// with one draw from `rng`.
SampledToken Sample(std::span<const float> logits, const SamplingParams& params,
                    std::mt19937_64& rng);

}  // namespace raio::llm
