// Attention over the paged KV cache on the CPU, as plain loops over the cache in place:
// for each query token, each head attends to positions [0, pos] of its own sequence,
// reading keys and values through the sequence's block table. No gather, no padding and
// no per-group operator calls, which at small head sizes cost more than the arithmetic.
// It sums in the same order as tests/llm/reference_llama.h. Other devices use the
// libtorch path in model.cc. Internal to the model runtime.
// Thread-safety: a pure function; it splits the tokens over libtorch's intra-op threads.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace raio::llm::internal {

// One query token: its position and its sequence's block table.
struct QueryToken {
  int64_t pos;
  const int* block_table;
};

// q [T, n_heads, head_size] and the caches [slots, n_kv_heads, head_size], contiguous,
// float32 or float64, on the CPU. Returns [T, n_heads * head_size] of q's dtype.
at::Tensor PagedAttentionCpu(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const std::vector<QueryToken>& tokens,
                             int block_size);

}  // namespace raio::llm::internal
