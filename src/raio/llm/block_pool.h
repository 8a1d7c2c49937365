// The paged KV cache's block pool with prefix caching, after vLLM V1's BlockPool and
// KVCacheManager: a fixed number of blocks of `block_size` token slots; a block is in use
// while some request references it (reference counted) and free otherwise. Free blocks
// sit in one queue, least recently freed first; a free block that still holds a full,
// hashed block of tokens stays findable by its hash until it is reallocated (evicted),
// so a request with the same prefix can take it back without recomputing it.
//
// A full block's key is its tokens plus the hash of the block before it (so that equal
// blocks after different prefixes never match); lookups compare the tokens exactly.
//
// Thread-safety: thread-compatible; the engine uses it from its step thread only.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace raio::llm {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size, bool enable_prefix_caching = true);

  // Hash of a full block of tokens that follows a block of hash `parent` (0 for the first).
  static uint64_t HashBlock(uint64_t parent, std::span<const int> tokens);

  // Takes `n` blocks (reference count 1), evicting the least recently freed cached blocks
  // first. nullopt, taking nothing, when fewer than `n` blocks are free.
  std::optional<std::vector<int>> Allocate(int n);
  // The longest run of cached full blocks that `tokens` starts with, at most `max_blocks`;
  // each gets one more reference (and leaves the free queue if it was there).
  std::vector<int> AcquireCachedPrefix(std::span<const int> tokens, int max_blocks);
  // Drops one reference of each block. Blocks reaching zero join the free queue's tail in
  // reverse order, so a sequence's last blocks are evicted before its first ones (which
  // other requests are likelier to share).
  void Free(std::span<const int> blocks);
  // Records that `block` now holds the full block `tokens` whose hash is `hash`, so that
  // later requests can find it. No-op when prefix caching is off or the hash is taken.
  void CacheFullBlock(int block, uint64_t hash, std::span<const int> tokens);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  // Share of blocks in use, in [0, 1] (vllm:kv_cache_usage_perc).
  double Usage() const;
  // Prefix-cache lookups and hits, in blocks (for metrics and tests).
  int64_t prefix_queries() const { return queries_; }
  int64_t prefix_hits() const { return hits_; }

 private:
  struct Block {
    int ref_count = 0;
    std::optional<uint64_t> hash;  // set while the block is findable in cached_
    std::vector<int> tokens;       // its tokens while cached
    std::list<int>::iterator free_it;
    bool in_free = false;
  };
  void Evict(int block);

  const int block_size_;
  const bool prefix_caching_;
  std::vector<Block> blocks_;
  std::list<int> free_;  // front: least recently freed
  std::unordered_map<uint64_t, int> cached_;
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace raio::llm
