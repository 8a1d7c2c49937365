// The OpenAI-compatible request and response JSON (as vLLM serves it): parsing of
// `/v1/completions` and `/v1/chat/completions` bodies into engine requests, and the
// response, stream-chunk and error objects. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "raio/llm/engine_types.h"
#include "raio/llm/sampling.h"
#include "raio/llm/tokenizer.h"

namespace raio::llm {

// An error answered as {"object": "error", "message", "type", "param", "code"}.
struct ApiError {
  int status = 400;  // HTTP status
  std::string message;
  std::string type = "BadRequestError";
  std::string param;
};
nlohmann::json ErrorJson(const ApiError& e);
// An error inside an event stream, as vLLM sends it and OpenAI's clients detect it (an
// event with an `error` member): {"error": ErrorJson(e)}.
nlohmann::json StreamErrorJson(const ApiError& e);

struct ApiRequest {
  bool chat = false;
  std::string model;        // as given (empty: the served one)
  std::vector<int> prompt;  // token ids, BOS first
  SamplingParams params;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool max_tokens_given = false;
};

// Parses a request body. `served_model` is the only model id accepted (404 otherwise);
// max_tokens defaults to 16 for completions and to the rest of the context for chat.
// Returns false and fills `error` on malformed JSON, invalid UTF-8, a wrong field type or
// value (temperature < 0, top_p outside (0, 1], max_tokens <= 0, n != 1, ...).
bool ParseApiRequest(const std::string& body, bool chat, const std::string& served_model,
                     const Tokenizer& tokenizer, int max_model_len, ApiRequest* out,
                     ApiError* error);

// Accumulated output of one request, for the non-streaming reply.
struct ApiResult {
  std::string text;
  std::vector<int> token_ids;
  std::vector<SampledToken> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  int prompt_tokens = 0, completion_tokens = 0;
};

nlohmann::json UsageJson(int prompt_tokens, int completion_tokens);
// The whole reply (text_completion or chat.completion).
nlohmann::json ResponseJson(const ApiRequest& req, const std::string& id, int64_t created,
                            const std::string& model, const ApiResult& result,
                            const Tokenizer& tokenizer);
// One stream chunk for output `o` (a completion chunk, or a chat.completion.chunk whose
// delta carries the text; `first` adds the assistant role).
nlohmann::json ChunkJson(const ApiRequest& req, const std::string& id, int64_t created,
                         const std::string& model, const RequestOutput& o, bool first,
                         const Tokenizer& tokenizer);
// JSON text with invalid UTF-8 (a token split inside a character) replaced, never thrown.
std::string Dump(const nlohmann::json& j);

}  // namespace raio::llm
