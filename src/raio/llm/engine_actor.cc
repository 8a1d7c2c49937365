#include "raio/llm/engine_actor.h"

#include <raio/raio.h>

#include "absl/strings/str_cat.h"
#include "raio/llm/model.h"

namespace raio::llm {
namespace wire {

// Messages of the actor calls (msgpack).
struct Config {
  std::string model_dir;
  int max_num_seqs = 0, max_num_batched_tokens = 0, block_size = 0, max_queued_requests = 0;
  int64_t kv_cache_bytes = 0;
  bool enable_prefix_caching = true, static_batching = false;
  std::string device;
  int torch_threads = 1;
  std::string lora_dir;  // a PEFT LoRA adapter merged at load; empty: none
  RAIO_SERIALIZE(model_dir, max_num_seqs, max_num_batched_tokens, block_size, max_queued_requests,
                 kv_cache_bytes, enable_prefix_caching, static_batching, device, torch_threads,
                 lora_dir);
};

struct Params {
  double temperature = 1, top_p = 1;
  int top_k = -1, max_tokens = 16;
  bool has_seed = false;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<int> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none
  RAIO_SERIALIZE(temperature, top_p, top_k, max_tokens, has_seed, seed, stop, stop_token_ids,
                 ignore_eos, logprobs);
};

struct Token {
  int token = 0;
  float logprob = 0;
  std::vector<int> top_tokens;
  std::vector<float> top_logprobs;
  RAIO_SERIALIZE(token, logprob, top_tokens, top_logprobs);
};

struct Output {
  std::string request_id;
  std::vector<int> token_ids;
  std::vector<Token> logprobs;
  std::string text;
  bool finished = false;
  int finish_reason = 0;
  int error_code = 0;
  std::string error_message;
  int prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
  RAIO_SERIALIZE(request_id, token_ids, logprobs, text, finished, finish_reason, error_code,
                 error_message, prompt_tokens, completion_tokens, cached_prompt_tokens);
};

// A Status and a value.
struct Reply {
  int code = 0;
  std::string message;
  std::string id;
  std::vector<Output> outputs;
  RAIO_SERIALIZE(code, message, id, outputs);
};

Reply FromStatus(const absl::Status& s) {
  return {static_cast<int>(s.code()), std::string(s.message()), "", {}};
}
absl::Status ToStatus(const Reply& r) {
  return absl::Status(static_cast<absl::StatusCode>(r.code), r.message);
}

Output ToWire(const RequestOutput& o) {
  Output w;
  w.request_id = o.request_id;
  w.token_ids = o.token_ids;
  for (const SampledToken& s : o.logprobs) {
    Token t{s.token, s.logprob, {}, {}};
    for (const TokenLogprob& a : s.top) {
      t.top_tokens.push_back(a.token);
      t.top_logprobs.push_back(a.logprob);
    }
    w.logprobs.push_back(std::move(t));
  }
  w.text = o.text;
  w.finished = o.finished;
  w.finish_reason = static_cast<int>(o.finish_reason);
  w.error_code = static_cast<int>(o.error.code());
  w.error_message = std::string(o.error.message());
  w.prompt_tokens = o.prompt_tokens;
  w.completion_tokens = o.completion_tokens;
  w.cached_prompt_tokens = o.cached_prompt_tokens;
  return w;
}

RequestOutput FromWire(Output& w) {
  RequestOutput o;
  o.request_id = std::move(w.request_id);
  o.token_ids = std::move(w.token_ids);
  for (const Token& t : w.logprobs) {
    SampledToken s{t.token, t.logprob, {}};
    for (size_t i = 0; i < t.top_tokens.size(); ++i) {
      s.top.push_back({t.top_tokens[i], t.top_logprobs[i]});
    }
    o.logprobs.push_back(std::move(s));
  }
  o.text = std::move(w.text);
  o.finished = w.finished;
  o.finish_reason = static_cast<FinishReason>(w.finish_reason);
  o.error = absl::Status(static_cast<absl::StatusCode>(w.error_code), w.error_message);
  o.prompt_tokens = w.prompt_tokens;
  o.completion_tokens = w.completion_tokens;
  o.cached_prompt_tokens = w.cached_prompt_tokens;
  return o;
}

}  // namespace wire

// The actor: an Engine in the worker process, and the outputs of its requests since the
// last PollAll.
class EngineActor {
 public:
  static EngineActor* Create(wire::Config c) {
    SetTorchThreads(c.torch_threads);
    absl::StatusOr<LoadedModel> model = LoadModelDir(c.model_dir, c.lora_dir);
    if (!model.ok()) throw std::runtime_error(std::string(model.status().message()));
    EngineConfig config{.max_num_seqs = c.max_num_seqs,
                        .max_num_batched_tokens = c.max_num_batched_tokens,
                        .kv_cache_bytes = c.kv_cache_bytes,
                        .block_size = c.block_size,
                        .enable_prefix_caching = c.enable_prefix_caching,
                        .max_queued_requests = c.max_queued_requests,
                        .device = c.device,
                        .static_batching = c.static_batching};
    auto engine = Engine::Create(*std::move(model), config);
    if (!engine.ok()) throw std::runtime_error(std::string(engine.status().message()));
    return new EngineActor(*std::move(engine));
  }
  ~EngineActor() { engine_->Stop(); }

  bool Ready() { return true; }

  wire::Reply Submit(std::vector<int> prompt, wire::Params p) {
    SamplingParams sp;
    sp.temperature = p.temperature;
    sp.top_p = p.top_p;
    sp.top_k = p.top_k;
    sp.max_tokens = p.max_tokens;
    if (p.has_seed) sp.seed = p.seed;
    sp.stop = std::move(p.stop);
    sp.stop_token_ids = std::move(p.stop_token_ids);
    sp.ignore_eos = p.ignore_eos;
    if (p.logprobs >= 0) sp.logprobs = p.logprobs;
    absl::StatusOr<std::string> id =
        engine_->AddRequest(std::move(prompt), sp, [this](const RequestOutput& o) {
          absl::MutexLock l(&mu_);
          pending_.push_back(o);
        });
    if (!id.ok()) return wire::FromStatus(id.status());
    return {0, "", *id, {}};
  }

  // Every request's outputs since the last call, waiting up to wait_ms for one.
  wire::Reply PollAll(int wait_ms) {
    std::vector<RequestOutput> outs;
    {
      absl::MutexLock l(&mu_);
      auto ready = [](std::vector<RequestOutput>* q) { return !q->empty(); };
      mu_.AwaitWithTimeout(absl::Condition(+ready, &pending_), absl::Milliseconds(wait_ms));
      outs.swap(pending_);
    }
    wire::Reply r;
    r.outputs.reserve(outs.size());
    for (const RequestOutput& o : outs) r.outputs.push_back(wire::ToWire(o));
    return r;
  }

  void Abort(std::string id) { engine_->Abort(id); }
  std::string Metrics() { return engine_->metrics().Render(engine_->model_name()); }

 private:
  explicit EngineActor(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
    engine_->Start();
  }
  std::unique_ptr<Engine> engine_;
  absl::Mutex mu_;
  std::vector<RequestOutput> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace raio::llm

RAIO_REMOTE(raio::llm::EngineActor::Create, &raio::llm::EngineActor::Ready,
            &raio::llm::EngineActor::Submit, &raio::llm::EngineActor::PollAll,
            &raio::llm::EngineActor::Abort, &raio::llm::EngineActor::Metrics);

namespace raio::llm {

struct ActorEngineClient::Handle {
  raio::ActorHandle<EngineActor> actor;
};

ActorEngineClient::ActorEngineClient(LoadedModel model, std::unique_ptr<Handle> handle)
    : model_(std::move(model)), handle_(std::move(handle)) {
  poller_ = std::thread([this] { PollLoop(); });
}

ActorEngineClient::~ActorEngineClient() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  poller_.join();  // within one PollAll (100 ms)
  try {
    handle_->actor.Kill();
  } catch (const std::exception&) {
    // raio already shut down: the actor went with it.
  }
}

bool ActorEngineClient::PollerHasWork() const {
  if (stopping_ || !dropped_.empty()) return true;
  for (const auto& [id, ch] : channels_) {
    if (!ch->finished) return true;
  }
  return false;
}

void ActorEngineClient::PollLoop() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto has_work = [](ActorEngineClient* c)
                          ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->PollerHasWork(); };
      mu_.Await(absl::Condition(+has_work, this));
      if (stopping_) return;
    }
    wire::Reply r;
    absl::Status failed;
    try {
      r = handle_->actor.Task(&EngineActor::PollAll).Remote(100).Get();
    } catch (const std::exception& ex) {
      failed = absl::UnavailableError(absl::StrCat("the engine actor failed: ", ex.what()));
    }
    absl::MutexLock l(&mu_);
    if (!failed.ok()) {
      // Its requests are gone with it (a restarted engine starts empty): fail them all.
      for (auto& [id, ch] : channels_) {
        if (ch->finished) continue;
        RequestOutput o;
        o.request_id = id;
        o.finished = true;
        o.finish_reason = FinishReason::kAbort;
        o.error = failed;
        ch->outputs.push_back(std::move(o));
        ch->finished = true;
      }
      dropped_.clear();
      continue;
    }
    for (wire::Output& w : r.outputs) {
      if (dropped_.contains(w.request_id)) {
        if (w.finished) dropped_.erase(w.request_id);
        continue;
      }
      std::shared_ptr<Channel>& ch = channels_[w.request_id];  // outputs may beat Submit's reply
      if (ch == nullptr) ch = std::make_shared<Channel>();
      ch->finished = ch->finished || w.finished;
      ch->outputs.push_back(wire::FromWire(w));
    }
  }
}

absl::StatusOr<std::unique_ptr<ActorEngineClient>> ActorEngineClient::Create(
    const ActorEngineOptions& o) {
  absl::StatusOr<LoadedModel> model = LoadModelDir(o.model_dir);
  if (!model.ok()) return model.status();
  ModelWeights empty;  // only the tokenizer is used here
  empty.config = model->weights.config;
  model->weights = std::move(empty);
  const EngineConfig& e = o.engine;
  wire::Config c{o.model_dir,
                 e.max_num_seqs,
                 e.max_num_batched_tokens,
                 e.block_size,
                 e.max_queued_requests,
                 e.kv_cache_bytes,
                 e.enable_prefix_caching,
                 e.static_batching,
                 e.device,
                 o.torch_threads,
                 o.lora_dir};
  try {
    auto handle = std::make_unique<Handle>(
        Handle{raio::Actor(EngineActor::Create)
                   .SetResources(o.resources)
                   .SetMaxRestarts(o.max_restarts)
                   .SetMaxConcurrency(std::min(1000, e.max_num_seqs + e.max_queued_requests + 16))
                   .Remote(c)});
    handle->actor.Task(&EngineActor::Ready).Remote().Get();
    return std::unique_ptr<ActorEngineClient>(
        new ActorEngineClient(*std::move(model), std::move(handle)));
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat("the engine actor failed: ", ex.what()));
  }
}

absl::StatusOr<std::string> ActorEngineClient::Submit(std::vector<int> prompt,
                                                      const SamplingParams& sp) {
  wire::Params p{sp.temperature,
                 sp.top_p,
                 sp.top_k,
                 sp.max_tokens,
                 sp.seed.has_value(),
                 sp.seed.value_or(0),
                 sp.stop,
                 sp.stop_token_ids,
                 sp.ignore_eos,
                 sp.logprobs ? *sp.logprobs : -1};
  try {
    wire::Reply r = handle_->actor.Task(&EngineActor::Submit).Remote(prompt, p).Get();
    if (r.code != 0) return wire::ToStatus(r);
    absl::MutexLock l(&mu_);
    std::shared_ptr<Channel>& ch = channels_[r.id];  // the poller may have made it already
    if (ch == nullptr) ch = std::make_shared<Channel>();
    return r.id;
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat("the engine actor failed: ", ex.what()));
  }
}

absl::StatusOr<std::vector<RequestOutput>> ActorEngineClient::Poll(const std::string& id,
                                                                   absl::Duration wait) {
  absl::MutexLock l(&mu_);
  auto it = channels_.find(id);
  if (it == channels_.end()) return absl::NotFoundError("unknown request " + id);
  std::shared_ptr<Channel> ch = it->second;
  auto ready = [](Channel* c) { return !c->outputs.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(+ready, ch.get()), wait);
  std::vector<RequestOutput> out;
  out.swap(ch->outputs);
  if (ch->finished && ch->outputs.empty() && !out.empty() && out.back().finished) {
    auto again = channels_.find(id);  // Abort may have removed it meanwhile
    if (again != channels_.end() && again->second == ch) channels_.erase(again);
  }
  return out;
}

void ActorEngineClient::Abort(const std::string& id) {
  {
    absl::MutexLock l(&mu_);
    auto it = channels_.find(id);
    // Nobody polls an aborted request; its remaining outputs are dropped as they come.
    if (it != channels_.end()) {
      if (!it->second->finished) dropped_.insert(id);
      channels_.erase(it);
    }
  }
  try {
    handle_->actor.Task(&EngineActor::Abort).Remote(id).Get();
  } catch (const std::exception&) {
  }
}

absl::Status ActorEngineClient::Health() {
  try {
    handle_->actor.Task(&EngineActor::Ready).Remote().Get(std::chrono::seconds(5));
    return absl::OkStatus();
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat("the engine actor failed: ", ex.what()));
  }
}

std::string ActorEngineClient::Metrics() {
  try {
    return handle_->actor.Task(&EngineActor::Metrics).Remote().Get();
  } catch (const std::exception& ex) {
    return absl::StrCat("# the engine actor failed: ", ex.what(), "\n");
  }
}

}  // namespace raio::llm
