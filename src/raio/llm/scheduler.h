// The step scheduler, after vLLM V1's: no prefill and decode phases, only requests whose
// computed tokens lag behind their tokens. Each step hands out one token budget
// (`max_num_batched_tokens`): first to RUNNING requests in order (a decode needs one
// token, an unfinished prefill the rest of its prompt, capped by what is left), then to
// WAITING requests first come first served while fewer than `max_num_seqs` run (chunked
// prefill: a prompt that does not fit gets part of the budget now, the rest later).
// Blocks are allocated as tokens are scheduled; when none is left, the newest running
// request is preempted (its blocks freed, back to the front of WAITING, recomputed later).
// New requests reuse cached blocks of their longest cached prompt prefix.
//
// Thread-safety: thread-compatible; owned by the engine's step thread.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "raio/llm/block_pool.h"
#include "raio/llm/request.h"

namespace raio::llm::internal {

struct SchedulerConfig {
  int max_num_seqs = 128;
  int max_num_batched_tokens = 2048;
  // Baseline for benchmarks: admit waiting requests only when none runs, and then run
  // that batch to completion (static batching), instead of continuous batching.
  bool static_batching = false;
};

struct ScheduledChunk {
  Request* request;
  int num_tokens;  // tokens [num_computed, num_computed + num_tokens) run this step
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockPool* pool);

  // Queues `r` (state WAITING) behind the others.
  void Add(Request* r);
  // Picks this step's chunks and allocates their blocks. Empty when there is nothing to do.
  std::vector<ScheduledChunk> Schedule();
  // After the step ran: advances num_computed and registers newly full blocks in the
  // prefix cache.
  void OnChunkComputed(const ScheduledChunk& c);
  // Removes `r` from the queues and frees its blocks (finished or aborted).
  void Remove(Request* r);

  const std::deque<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  int BlocksFor(int num_tokens) const;
  void Preempt(Request* r);
  bool Grow(Request* r, int num_new);

  SchedulerConfig config_;
  BlockPool* pool_;
  std::deque<Request*> running_, waiting_;
  int64_t num_preemptions_ = 0;
};

}  // namespace raio::llm::internal
