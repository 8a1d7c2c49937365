#include "raio/llm/engine.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "raio/llm/block_pool.h"
#include "raio/llm/model.h"
#include "raio/llm/request.h"
#include "raio/llm/scheduler.h"

namespace raio::llm {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Engine::Engine(LoadedModel model, const EngineConfig& config)
    : model_(std::move(model)), config_(config) {
  // Ids are unique across engines: a restarted engine actor must not hand out an id that
  // a client of its previous incarnation still polls.
  std::random_device rd;
  id_prefix_ = absl::StrCat("req-", absl::Hex(rd(), absl::kZeroPad8), "-");
}

Engine::~Engine() { Stop(); }

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(LoadedModel model,
                                                       const EngineConfig& config) {
  if (config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0 || config.block_size <= 0 ||
      config.max_queued_requests < 0) {
    return absl::InvalidArgumentError(
        "engine: max_num_seqs, max_num_batched_tokens and block_size must be > 0");
  }
  const ModelConfig& mc = model.weights.config;
  const int64_t block_bytes = LlamaModel::BlockBytes(mc, config.block_size);
  const int64_t num_blocks = config.kv_cache_bytes / block_bytes;
  const int64_t min_blocks = (mc.max_seq_len + config.block_size - 1) / config.block_size;
  if (num_blocks < min_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: kv_cache_bytes ", config.kv_cache_bytes, " holds ", num_blocks,
                     " blocks; one full-length sequence needs ", min_blocks, " (",
                     min_blocks * block_bytes, " bytes)"));
  }
  std::unique_ptr<Engine> e(new Engine(std::move(model), config));
  absl::StatusOr<std::unique_ptr<LlamaModel>> rt =
      LlamaModel::Create(e->model_.weights, {.device = config.device,
                                             .block_size = config.block_size,
                                             .num_blocks = static_cast<int>(num_blocks)});
  if (!rt.ok()) return rt.status();
  e->runtime_ = *std::move(rt);
  e->pool_ = std::make_unique<BlockPool>(static_cast<int>(num_blocks), config.block_size,
                                         config.enable_prefix_caching);
  e->scheduler_ = std::make_unique<internal::Scheduler>(
      internal::SchedulerConfig{.max_num_seqs = config.max_num_seqs,
                                .max_num_batched_tokens = config.max_num_batched_tokens,
                                .static_batching = config.static_batching},
      e->pool_.get());
  return e;
}

void Engine::Start() {
  absl::MutexLock l(&mu_);
  if (started_ || stopped_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void Engine::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopped_) return;
    stopped_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) {
    thread_.join();
  } else {
    DrainInbox();
    std::vector<internal::Request*> all;
    for (auto& [id, r] : requests_) all.push_back(r.get());
    for (internal::Request* r : all) Finish(*r, FinishReason::kAbort, absl::OkStatus());
  }
}

absl::StatusOr<std::string> Engine::AddRequest(std::vector<int> prompt,
                                               const SamplingParams& params,
                                               OutputCallback on_output) {
  if (absl::Status s = params.Validate(); !s.ok()) return s;
  const ModelConfig& mc = model_config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt must not be empty");
  for (int t : prompt) {
    if (t < 0 || t >= mc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is out of vocabulary"));
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > mc.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "This model's maximum context length is ", mc.max_seq_len, " tokens. However, you ",
        "requested ", total, " tokens (", prompt.size(), " in the prompt, ", params.max_tokens,
        " in the completion). Please reduce the length of the prompt or max_tokens."));
  }
  const int limit = config_.max_num_seqs + config_.max_queued_requests;
  if (unfinished_.fetch_add(1) >= limit) {
    unfinished_.fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("the engine has ", limit, " unfinished requests; retry later"));
  }
  auto r = std::make_unique<internal::Request>();
  r->id = absl::StrCat(id_prefix_, next_id_.fetch_add(1));
  r->prompt = prompt;
  r->tokens = std::move(prompt);
  r->params = params;
  r->rng.seed(params.seed ? *params.seed : std::random_device{}());
  r->on_output = std::move(on_output);
  r->arrival_time = std::chrono::steady_clock::now();
  std::string id = r->id;
  absl::MutexLock l(&mu_);
  if (stopped_) {
    unfinished_.fetch_sub(1);
    return absl::FailedPreconditionError("the engine is stopped");
  }
  inbox_.push_back(std::move(r));
  cv_.Signal();
  return id;
}

void Engine::Abort(const std::string& request_id) {
  absl::MutexLock l(&mu_);
  aborts_.push_back(request_id);
  cv_.Signal();
}

void Engine::DrainInbox() {
  std::deque<std::unique_ptr<internal::Request>> inbox;
  std::vector<std::string> aborts;
  {
    absl::MutexLock l(&mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (auto& r : inbox) {
    scheduler_->Add(r.get());
    metrics_.AddPromptTokens(static_cast<int64_t>(r->prompt.size()));
    requests_.emplace(r->id, std::move(r));
  }
  for (const std::string& id : aborts) {
    auto it = requests_.find(id);
    if (it != requests_.end()) Finish(*it->second, FinishReason::kAbort, absl::OkStatus());
  }
}

void Engine::Run() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      while (requests_.empty() && !stopped_ && inbox_.empty() && aborts_.empty()) {
        cv_.Wait(&mu_);
      }
      if (stopped_) break;
    }
    Step();
  }
  DrainInbox();
  std::vector<internal::Request*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  for (internal::Request* r : all) Finish(*r, FinishReason::kAbort, absl::OkStatus());
}

bool Engine::Step() {
  DrainInbox();
  std::vector<internal::ScheduledChunk> chunks = scheduler_->Schedule();
  const int64_t preemptions_before = stats_preemptions_;
  if (!chunks.empty()) {
    std::vector<SequenceChunk> batch;
    batch.reserve(chunks.size());
    const auto now = std::chrono::steady_clock::now();
    for (const internal::ScheduledChunk& c : chunks) {
      internal::Request* r = c.request;
      if (!r->ever_scheduled) {
        r->ever_scheduled = true;
        metrics_.ObserveQueueTime(Seconds(now - r->arrival_time));
      }
      batch.push_back({std::span<const int>(r->tokens).subspan(r->num_computed, c.num_tokens),
                       r->num_computed, r->blocks});
    }
    absl::StatusOr<std::vector<float>> logits = runtime_->Forward(batch);
    const int64_t vocab = model_config().vocab_size;
    for (size_t i = 0; i < chunks.size(); ++i) {
      internal::Request& r = *chunks[i].request;
      if (!logits.ok()) {
        Finish(r, FinishReason::kAbort, logits.status());
        continue;
      }
      scheduler_->OnChunkComputed(chunks[i]);
      if (r.num_computed < r.num_tokens()) continue;  // a prefill chunk: no token yet
      SampledToken s =
          Sample(std::span<const float>(logits->data() + i * vocab, vocab), r.params, r.rng);
      FinishReason finish = FinishReason::kNone;
      ProcessToken(r, s, &finish);
      if (finish != FinishReason::kNone) {
        Finish(r, finish, absl::OkStatus());
      } else {
        Deliver(r, FinishReason::kNone, absl::OkStatus());
      }
    }
  }
  stats_preemptions_ = scheduler_->num_preemptions();
  metrics_.AddPreemptions(stats_preemptions_ - preemptions_before);
  const int running = static_cast<int>(scheduler_->running().size());
  const int waiting = static_cast<int>(scheduler_->waiting().size());
  metrics_.SetQueues(running, waiting, pool_->Usage());
  metrics_.SetPrefixCache(pool_->prefix_queries() * pool_->block_size(),
                          pool_->prefix_hits() * pool_->block_size());
  {
    absl::MutexLock l(&mu_);
    stats_ = {running,
              waiting,
              pool_->num_blocks(),
              pool_->num_free_blocks(),
              scheduler_->num_preemptions(),
              pool_->prefix_queries(),
              pool_->prefix_hits()};
  }
  return !requests_.empty();
}

void Engine::Finish(internal::Request& r, FinishReason finish, const absl::Status& error) {
  scheduler_->Remove(&r);
  Deliver(r, finish, error);
  const auto now = std::chrono::steady_clock::now();
  metrics_.ObserveE2eLatency(Seconds(now - r.arrival_time));
  metrics_.RequestFinished(error.ok() ? FinishReasonName(finish) : "error");
  unfinished_.fetch_sub(1);
  requests_.erase(r.id);  // destroys r
}

absl::StatusOr<Completion> Engine::Generate(std::vector<int> prompt, const SamplingParams& params) {
  struct State {
    absl::Mutex mu;
    bool done = false;
    Completion c;
    absl::Status error;
  };
  auto st = std::make_shared<State>();
  st->c.prompt_tokens = static_cast<int>(prompt.size());
  absl::StatusOr<std::string> id =
      AddRequest(std::move(prompt), params, [st](const RequestOutput& o) {
        absl::MutexLock l(&st->mu);
        st->c.token_ids.insert(st->c.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
        st->c.logprobs.insert(st->c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        st->c.text += o.text;
        st->c.cached_prompt_tokens = o.cached_prompt_tokens;
        if (o.finished) {
          st->done = true;
          st->c.finish_reason = o.finish_reason;
          st->error = o.error;
        }
      });
  if (!id.ok()) return id.status();
  bool started;
  {
    absl::MutexLock l(&mu_);
    started = started_;
  }
  if (!started) {
    for (;;) {
      {
        absl::MutexLock l(&st->mu);
        if (st->done) break;
      }
      Step();
    }
  }
  absl::MutexLock l(&st->mu);
  st->mu.Await(absl::Condition(&st->done));
  if (!st->error.ok()) return st->error;
  return st->c;
}

EngineStats Engine::Stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace raio::llm
