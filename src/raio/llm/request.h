// One generation request as the engine tracks it (engine-internal): its tokens, how many
// of them are in the KV cache, its block table, sampling state and output text.
// Thread-safety: owned by the engine's step thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "raio/llm/engine_types.h"
#include "raio/llm/sampling.h"

namespace raio::llm::internal {

enum class RequestState { kWaiting, kRunning, kFinished };

struct Request {
  std::string id;
  uint64_t arrival_seq = 0;  // FCFS order
  std::vector<int> prompt;
  std::vector<int> tokens;  // prompt then generated tokens
  SamplingParams params;
  std::mt19937_64 rng;
  OutputCallback on_output;

  RequestState state = RequestState::kWaiting;
  int num_computed = 0;                // tokens whose keys/values are in the cache
  std::vector<int> blocks;             // block table: physical block of each logical block
  std::vector<uint64_t> block_hashes;  // hashes of the leading full blocks
  int num_preemptions = 0;
  bool ever_scheduled = false;
  int num_cached_prompt_tokens = 0;  // prefix-cache hit of the first admission

  // Output text (decoded generated tokens, after stop-string truncation) and how much of
  // it has been delivered.
  std::string text;
  size_t text_sent = 0;
  std::vector<SampledToken> pending_tokens;  // sampled since the last delivery

  std::chrono::steady_clock::time_point arrival_time, first_token_time, last_token_time;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_generated() const { return static_cast<int>(tokens.size() - prompt.size()); }
};

}  // namespace raio::llm::internal
