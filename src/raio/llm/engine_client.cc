#include "raio/llm/engine_client.h"

namespace raio::llm {

absl::StatusOr<std::string> LocalEngineClient::Submit(std::vector<int> prompt,
                                                      const SamplingParams& params) {
  auto ch = std::make_shared<Channel>();
  absl::StatusOr<std::string> id =
      engine_->AddRequest(std::move(prompt), params, [ch](const RequestOutput& o) {
        absl::MutexLock l(&ch->mu);
        ch->outputs.push_back(o);
      });
  if (!id.ok()) return id.status();
  absl::MutexLock l(&mu_);
  channels_.emplace(*id, std::move(ch));
  return id;
}

absl::StatusOr<std::vector<RequestOutput>> LocalEngineClient::Poll(const std::string& id,
                                                                   absl::Duration wait) {
  std::shared_ptr<Channel> ch;
  {
    absl::MutexLock l(&mu_);
    auto it = channels_.find(id);
    if (it == channels_.end()) return absl::NotFoundError("unknown request " + id);
    ch = it->second;
  }
  std::vector<RequestOutput> out;
  {
    absl::MutexLock l(&ch->mu);
    auto ready = [](std::vector<RequestOutput>* q) { return !q->empty(); };
    ch->mu.AwaitWithTimeout(absl::Condition(+ready, &ch->outputs), wait);
    out.swap(ch->outputs);
  }
  if (!out.empty() && out.back().finished) {
    absl::MutexLock l(&mu_);
    channels_.erase(id);
  }
  return out;
}

void LocalEngineClient::Abort(const std::string& id) {
  engine_->Abort(id);
  absl::MutexLock l(&mu_);
  channels_.erase(id);  // nobody polls an aborted request
}

std::string LocalEngineClient::Metrics() {
  return engine_->metrics().Render(engine_->model_name());
}

}  // namespace raio::llm
