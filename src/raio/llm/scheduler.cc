#include "raio/llm/scheduler.h"

#include <algorithm>

namespace raio::llm::internal {

Scheduler::Scheduler(const SchedulerConfig& config, BlockPool* pool)
    : config_(config), pool_(pool) {}

void Scheduler::Add(Request* r) {
  r->state = RequestState::kWaiting;
  waiting_.push_back(r);
}

int Scheduler::BlocksFor(int num_tokens) const {
  return (num_tokens + pool_->block_size() - 1) / pool_->block_size();
}

bool Scheduler::Grow(Request* r, int num_new) {
  const int need = BlocksFor(r->num_computed + num_new) - static_cast<int>(r->blocks.size());
  if (need <= 0) return true;
  std::optional<std::vector<int>> got = pool_->Allocate(need);
  if (!got) return false;
  r->blocks.insert(r->blocks.end(), got->begin(), got->end());
  return true;
}

void Scheduler::Preempt(Request* r) {
  pool_->Free(r->blocks);
  r->blocks.clear();
  r->block_hashes.clear();
  r->num_computed = 0;
  r->state = RequestState::kWaiting;
  ++r->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(r);
}

std::vector<ScheduledChunk> Scheduler::Schedule() {
  std::vector<ScheduledChunk> out;
  int budget = config_.max_num_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = std::min(r->num_tokens() - r->num_computed, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!Grow(r, n)) {
      Request* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      preempted = true;
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    out.push_back({r, n});
    budget -= n;
    ++i;
  }
  const bool admit = !preempted && (!config_.static_batching || running_.empty());
  while (admit && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    if (r->blocks.empty()) {
      // Keep at least one token to compute, whose logits give the next token.
      const int max_blocks = (r->num_tokens() - 1) / pool_->block_size();
      r->blocks = pool_->AcquireCachedPrefix(r->tokens, max_blocks);
      r->num_computed = static_cast<int>(r->blocks.size()) * pool_->block_size();
      r->block_hashes.clear();
      uint64_t parent = 0;
      for (size_t b = 0; b < r->blocks.size(); ++b) {
        parent = BlockPool::HashBlock(parent, std::span<const int>(r->tokens).subspan(
                                                  b * pool_->block_size(), pool_->block_size()));
        r->block_hashes.push_back(parent);
      }
      if (r->num_preemptions == 0) r->num_cached_prompt_tokens = r->num_computed;
    }
    const int n = std::min(r->num_tokens() - r->num_computed, budget);
    if (!Grow(r, n)) {
      pool_->Free(r->blocks);  // give the prefix back; try again next step
      r->blocks.clear();
      r->block_hashes.clear();
      r->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    r->state = RequestState::kRunning;
    running_.push_back(r);
    out.push_back({r, n});
    budget -= n;
  }
  return out;
}

void Scheduler::OnChunkComputed(const ScheduledChunk& c) {
  Request* r = c.request;
  r->num_computed += c.num_tokens;
  const int bs = pool_->block_size();
  const int full = r->num_computed / bs;
  for (int b = static_cast<int>(r->block_hashes.size()); b < full; ++b) {
    std::span<const int> toks = std::span<const int>(r->tokens).subspan(b * bs, bs);
    uint64_t h = BlockPool::HashBlock(b == 0 ? 0 : r->block_hashes[b - 1], toks);
    r->block_hashes.push_back(h);
    pool_->CacheFullBlock(r->blocks[b], h, toks);
  }
}

void Scheduler::Remove(Request* r) {
  auto drop = [r](std::deque<Request*>& q) {
    q.erase(std::remove(q.begin(), q.end(), r), q.end());
  };
  drop(running_);
  drop(waiting_);
  pool_->Free(r->blocks);
  r->blocks.clear();
  r->block_hashes.clear();
  r->state = RequestState::kFinished;
}

}  // namespace raio::llm::internal
