// Engine: what happens to a request's sampled tokens (stop checks, detokenization,
// stop-string holdback) and how its outputs are delivered. Runs on the stepping thread.
#include <algorithm>

#include "raio/llm/engine.h"
#include "raio/llm/request.h"

namespace raio::llm {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Bytes at the end of `text` to hold back: a possible start of a stop string, or an
// unfinished UTF-8 character.
size_t SafeEnd(const std::string& text, const std::vector<std::string>& stops) {
  size_t end = CompleteUtf8Prefix(text);
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return std::min(end, text.size() - hold);
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    default:
      return "";
  }
}

void Engine::ProcessToken(internal::Request& r, const SampledToken& s, FinishReason* finish) {
  const auto now = std::chrono::steady_clock::now();
  if (r.num_generated() == 0) {
    r.first_token_time = now;
    metrics_.ObserveTimeToFirstToken(Seconds(now - r.arrival_time));
  } else {
    metrics_.ObserveTimePerOutputToken(Seconds(now - r.last_token_time));
  }
  r.last_token_time = now;
  metrics_.AddGenerationTokens(1);
  const int prev = r.tokens.back();
  r.tokens.push_back(s.token);
  r.pending_tokens.push_back(s);
  const SamplingParams& p = r.params;
  const Tokenizer& tok = tokenizer();
  // A generated BOS starts a new document (llama2.c stops there too): a stop like EOS.
  const bool stop_token = (!p.ignore_eos && (s.token == tok.eos_id() || s.token == tok.bos_id())) ||
                          std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), s.token) !=
                              p.stop_token_ids.end();
  if (stop_token) {
    *finish = FinishReason::kStop;
    return;
  }
  const size_t old = r.text.size();
  r.text += tok.Decode({s.token}, prev);
  size_t cut = std::string::npos;
  for (const std::string& stop : p.stop) {
    size_t from = old + 1 >= stop.size() ? old + 1 - stop.size() : 0;
    size_t at = r.text.find(stop, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    r.text.resize(cut);
    *finish = FinishReason::kStop;
  } else if (r.num_generated() >= p.max_tokens || r.num_tokens() >= model_config().max_seq_len) {
    *finish = FinishReason::kLength;
  }
}

void Engine::Deliver(internal::Request& r, FinishReason finish, const absl::Status& error) {
  const bool finished = finish != FinishReason::kNone;
  size_t end = finished ? r.text.size() : SafeEnd(r.text, r.params.stop);
  if (!finished && r.pending_tokens.empty() && end <= r.text_sent) return;
  RequestOutput out;
  out.request_id = r.id;
  for (const SampledToken& s : r.pending_tokens) out.token_ids.push_back(s.token);
  if (r.params.logprobs) out.logprobs = r.pending_tokens;
  r.pending_tokens.clear();
  if (end > r.text_sent) {
    out.text = r.text.substr(r.text_sent, end - r.text_sent);
    r.text_sent = end;
  }
  out.finished = finished;
  out.finish_reason = finish;
  out.error = error;
  out.prompt_tokens = static_cast<int>(r.prompt.size());
  out.completion_tokens = r.num_generated();
  out.cached_prompt_tokens = r.num_cached_prompt_tokens;
  if (r.on_output) r.on_output(out);
}

}  // namespace raio::llm
