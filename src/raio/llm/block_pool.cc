#include "raio/llm/block_pool.h"

#include <algorithm>

namespace raio::llm {

BlockPool::BlockPool(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  for (int i = 0; i < num_blocks; ++i) {
    blocks_[i].free_it = free_.insert(free_.end(), i);
    blocks_[i].in_free = true;
  }
}

uint64_t BlockPool::HashBlock(uint64_t parent, std::span<const int> tokens) {
  // splitmix64-style mixing of the parent hash and each token.
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int t : tokens) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull + (h << 6) +
         (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;
}

void BlockPool::Evict(int block) {
  Block& b = blocks_[block];
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end() && it->second == block) cached_.erase(it);
  b.hash.reset();
  b.tokens.clear();
}

std::optional<std::vector<int>> BlockPool::Allocate(int n) {
  if (n < 0 || n > num_free_blocks()) return std::nullopt;
  std::vector<int> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    int id = free_.front();
    free_.pop_front();
    Block& b = blocks_[id];
    b.in_free = false;
    Evict(id);
    b.ref_count = 1;
    out.push_back(id);
  }
  return out;
}

std::vector<int> BlockPool::AcquireCachedPrefix(std::span<const int> tokens, int max_blocks) {
  std::vector<int> out;
  if (!prefix_caching_) return out;
  uint64_t parent = 0;
  const int full = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / block_size_);
  for (int i = 0; i < full; ++i) {
    std::span<const int> block_tokens = tokens.subspan(i * block_size_, block_size_);
    uint64_t h = HashBlock(parent, block_tokens);
    ++queries_;
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Block& b = blocks_[it->second];
    if (!std::equal(b.tokens.begin(), b.tokens.end(), block_tokens.begin(), block_tokens.end())) {
      break;
    }
    if (b.in_free) {
      free_.erase(b.free_it);
      b.in_free = false;
    }
    ++b.ref_count;
    ++hits_;
    out.push_back(it->second);
    parent = h;
  }
  return out;
}

void BlockPool::Free(std::span<const int> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Block& b = blocks_[*it];
    if (--b.ref_count == 0) {
      b.free_it = free_.insert(free_.end(), *it);
      b.in_free = true;
    }
  }
}

void BlockPool::CacheFullBlock(int block, uint64_t hash, std::span<const int> tokens) {
  if (!prefix_caching_ || cached_.contains(hash)) return;
  Block& b = blocks_[block];
  if (b.hash) return;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  cached_.emplace(hash, block);
}

double BlockPool::Usage() const {
  return blocks_.empty() ? 0.0 : 1.0 - static_cast<double>(num_free_blocks()) / blocks_.size();
}

}  // namespace raio::llm
