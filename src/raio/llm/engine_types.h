// Values exchanged with raio::llm::Engine: what a caller gets back per step of its
// request. Thread-safety: plain values.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "raio/llm/sampling.h"

namespace raio::llm {

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason r);  // "", "stop", "length", "abort"

// A delta of a request's output: the tokens and text produced since the previous one.
// Text is held back while it might be the start of a stop string or ends inside a UTF-8
// character, so concatenating the deltas gives exactly the final text.
struct RequestOutput {
  std::string request_id;
  std::vector<int> token_ids;          // new generated tokens
  std::vector<SampledToken> logprobs;  // one per new token when logprobs were asked
  std::string text;                    // new text
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status error;  // set (with finished) when the engine failed it
  int prompt_tokens = 0;
  int completion_tokens = 0;     // generated so far
  int cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
};

// Called on the engine's step thread, once per step in which the request produced output
// and once when it finishes; it must not block or call back into the engine.
using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace raio::llm
