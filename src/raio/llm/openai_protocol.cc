#include "raio/llm/openai_protocol.h"

#include "absl/strings/str_cat.h"

namespace raio::llm {
namespace {

using nlohmann::json;

bool Fail(ApiError* e, std::string message, std::string param = "", int status = 400,
          std::string type = "BadRequestError") {
  *e = {status, std::move(message), std::move(type), std::move(param)};
  return false;
}

json CompletionLogprobs(const std::vector<SampledToken>& lps, const Tokenizer& tok) {
  json tokens = json::array(), token_lps = json::array(), top = json::array();
  for (const SampledToken& s : lps) {
    tokens.push_back(tok.TokenBytes(s.token));
    token_lps.push_back(s.logprob);
    json t = json::object();
    for (const TokenLogprob& a : s.top) t[tok.TokenBytes(a.token)] = a.logprob;
    top.push_back(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", top}};
}

json ChatLogprobs(const std::vector<SampledToken>& lps, const Tokenizer& tok) {
  json content = json::array();
  for (const SampledToken& s : lps) {
    json top = json::array();
    for (const TokenLogprob& a : s.top) {
      top.push_back({{"token", tok.TokenBytes(a.token)}, {"logprob", a.logprob}});
    }
    content.push_back(
        {{"token", tok.TokenBytes(s.token)}, {"logprob", s.logprob}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json FinishJson(FinishReason r) {
  return r == FinishReason::kNone ? json(nullptr) : json(FinishReasonName(r));
}

}  // namespace

json ErrorJson(const ApiError& e) {
  return {{"object", "error"},
          {"message", e.message},
          {"type", e.type},
          {"param", e.param.empty() ? json(nullptr) : json(e.param)},
          {"code", e.status}};
}

json StreamErrorJson(const ApiError& e) { return {{"error", ErrorJson(e)}}; }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool ParseApiRequest(const std::string& body, bool chat, const std::string& served_model,
                     const Tokenizer& tok, int max_model_len, ApiRequest* out, ApiError* error) {
  if (!IsValidUtf8(body)) return Fail(error, "the request body is not valid UTF-8");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(error, "the request body is not valid JSON");
  if (!j.is_object()) return Fail(error, "the request body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  try {
    if (j.contains("model") && !j["model"].is_null()) {
      if (!j["model"].is_string()) return Fail(error, "model must be a string", "model");
      r.model = j["model"];
      if (r.model != served_model) {
        return Fail(error, absl::StrCat("The model `", r.model, "` does not exist."), "model", 404,
                    "NotFoundError");
      }
    }
    r.prompt = {tok.bos_id()};
    if (chat) {
      if (!j.contains("messages") || !j["messages"].is_array()) {
        return Fail(error, "messages must be a list of {role, content}", "messages");
      }
      std::vector<ChatMessage> msgs;
      for (const json& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content")) {
          return Fail(error, "each message needs a string role and content", "messages");
        }
        // Content is a string, or (OpenAI's newer form) a list of parts, of which this
        // text-only model takes {"type": "text", "text": ...}, joined.
        const json& content = m["content"];
        std::string text;
        if (content.is_string()) {
          text = content.get<std::string>();
        } else if (content.is_array()) {
          for (const json& part : content) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string()) {
              return Fail(
                  error,
                  "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                  "messages");
            }
            text += part["text"].get<std::string>();
          }
        } else {
          return Fail(error, "each message needs a string role and content", "messages");
        }
        msgs.push_back({m["role"], std::move(text)});
      }
      absl::StatusOr<std::string> text = ApplyChatTemplate(msgs);
      if (!text.ok()) return Fail(error, std::string(text.status().message()), "messages");
      std::vector<int> ids = tok.Encode(*text);
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
    } else {
      if (!j.contains("prompt")) return Fail(error, "prompt is required", "prompt");
      json p = j["prompt"];
      if (p.is_array() && p.size() == 1 && p[0].is_string()) p = p[0];
      if (p.is_string()) {
        std::vector<int> ids = tok.Encode(p.get<std::string>());
        r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
      } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        r.prompt.clear();
        for (const json& t : p) {
          if (!t.is_number_integer())
            return Fail(error, "prompt token ids must be integers", "prompt");
          int64_t v = t.get<int64_t>();
          if (v < 0 || v >= tok.vocab_size()) {
            return Fail(error, absl::StrCat("token id ", v, " is out of vocabulary"), "prompt");
          }
          r.prompt.push_back(static_cast<int>(v));
        }
      } else {
        return Fail(error, "prompt must be a string, one string in a list, or token ids", "prompt");
      }
    }
    if (static_cast<int>(r.prompt.size()) >= max_model_len) {
      return Fail(error,
                  absl::StrCat("This model's maximum context length is ", max_model_len,
                               " tokens. However, your prompt has ", r.prompt.size(), " tokens."),
                  chat ? "messages" : "prompt");
    }
    SamplingParams& sp = r.params;
    const char* mt_key =
        chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (j.contains(mt_key) && !j[mt_key].is_null()) {
      if (!j[mt_key].is_number_integer())
        return Fail(error, "max_tokens must be an integer", mt_key);
      int64_t v = j[mt_key].get<int64_t>();
      if (v <= 0) return Fail(error, "max_tokens must be at least 1", mt_key);
      sp.max_tokens = static_cast<int>(std::min<int64_t>(v, 1 << 30));
      r.max_tokens_given = true;
    } else {
      sp.max_tokens = chat ? max_model_len - static_cast<int>(r.prompt.size()) : 16;
    }
    auto number = [&](const char* key, double* dst) -> bool {
      if (!j.contains(key) || j[key].is_null()) return true;
      if (!j[key].is_number()) return Fail(error, absl::StrCat(key, " must be a number"), key);
      *dst = j[key].get<double>();
      return true;
    };
    if (!number("temperature", &sp.temperature) || !number("top_p", &sp.top_p)) return false;
    if (sp.temperature < 0) return Fail(error, "temperature must be >= 0", "temperature");
    if (!(sp.top_p > 0 && sp.top_p <= 1)) return Fail(error, "top_p must be in (0, 1]", "top_p");
    if (j.contains("top_k") && !j["top_k"].is_null()) {
      if (!j["top_k"].is_number_integer()) return Fail(error, "top_k must be an integer", "top_k");
      sp.top_k = j["top_k"].get<int>();
    }
    if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) {
      return Fail(error, "only n = 1 is supported", "n");
    }
    if (j.contains("seed") && !j["seed"].is_null()) {
      if (!j["seed"].is_number_integer()) return Fail(error, "seed must be an integer", "seed");
      sp.seed = j["seed"].get<int64_t>();
    }
    if (j.contains("stop") && !j["stop"].is_null()) {
      const json& s = j["stop"];
      if (s.is_string()) {
        sp.stop.push_back(s);
      } else if (s.is_array()) {
        for (const json& x : s) {
          if (!x.is_string())
            return Fail(error, "stop must be a string or a list of strings", "stop");
          sp.stop.push_back(x);
        }
      } else {
        return Fail(error, "stop must be a string or a list of strings", "stop");
      }
    }
    if (j.contains("stop_token_ids") && j["stop_token_ids"].is_array()) {
      for (const json& x : j["stop_token_ids"]) sp.stop_token_ids.push_back(x.get<int>());
    }
    if (j.contains("ignore_eos") && j["ignore_eos"].is_boolean()) sp.ignore_eos = j["ignore_eos"];
    if (chat) {
      if (j.value("logprobs", false)) sp.logprobs = j.value("top_logprobs", 0);
    } else if (j.contains("logprobs") && !j["logprobs"].is_null()) {
      if (!j["logprobs"].is_number_integer())
        return Fail(error, "logprobs must be an integer", "logprobs");
      sp.logprobs = j["logprobs"].get<int>();
    }
    if (j.contains("stream") && !j["stream"].is_null()) {
      if (!j["stream"].is_boolean()) return Fail(error, "stream must be a boolean", "stream");
      r.stream = j["stream"];
    }
    if (j.contains("stream_options") && j["stream_options"].is_object()) {
      r.include_usage = j["stream_options"].value("include_usage", false);
    }
  } catch (const json::exception& e) {
    return Fail(error, absl::StrCat("bad field: ", e.what()));
  }
  if (absl::Status s = r.params.Validate(); !s.ok()) return Fail(error, std::string(s.message()));
  *out = std::move(r);
  return true;
}

json UsageJson(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json ResponseJson(const ApiRequest& req, const std::string& id, int64_t created,
                  const std::string& model, const ApiResult& res, const Tokenizer& tok) {
  json choice = {{"index", 0}, {"finish_reason", FinishJson(res.finish_reason)}};
  if (req.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", res.text}};
    choice["logprobs"] = req.params.logprobs ? ChatLogprobs(res.logprobs, tok) : json(nullptr);
  } else {
    choice["text"] = res.text;
    choice["logprobs"] =
        req.params.logprobs ? CompletionLogprobs(res.logprobs, tok) : json(nullptr);
  }
  return {{"id", id},
          {"object", req.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", UsageJson(res.prompt_tokens, res.completion_tokens)}};
}

json ChunkJson(const ApiRequest& req, const std::string& id, int64_t created,
               const std::string& model, const RequestOutput& o, bool first, const Tokenizer& tok) {
  json choice = {{"index", 0}, {"finish_reason", FinishJson(o.finish_reason)}};
  if (req.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!o.text.empty() || first) delta["content"] = o.text;
    choice["delta"] = delta;
    choice["logprobs"] = req.params.logprobs ? ChatLogprobs(o.logprobs, tok) : json(nullptr);
  } else {
    choice["text"] = o.text;
    choice["logprobs"] = req.params.logprobs ? CompletionLogprobs(o.logprobs, tok) : json(nullptr);
  }
  return {{"id", id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

}  // namespace raio::llm
