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

// q [T, n_heads, head_size]; keys transposed per block, k_cache [num_blocks, n_kv_heads,
// head_size, block_size]; v_cache [slots, n_kv_heads, head_size]; contiguous, float32 or
// float64, on the CPU. Returns [T, n_heads * head_size] of q's dtype.
at::Tensor PagedAttentionCpu(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const std::vector<QueryToken>& tokens,
                             int block_size);

// The other per-layer steps on the CPU as single loops, replacing a dozen small libtorch
// operators each (same arithmetic order as the reference):
// RMSNorm of x [T, dim] with weight w [dim]: w * (x / sqrt(mean(x^2) + eps)).
at::Tensor RmsNormCpu(const at::Tensor& x, const at::Tensor& w, double eps);
// Splits qkv [T, dim + 2 kv_dim] into q, k, v; rotates q and k (pairs 2i, 2i+1, tables
// cos/sin [max_seq_len, head_size / 2] at each token's position), writes k and v to
// the caches at `slots` (k_cache in the transposed block layout above), and returns
// q [T, n_heads, head_size].
at::Tensor RopeAndCacheCpu(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                           const std::vector<QueryToken>& tokens, const std::vector<int64_t>& slots,
                           at::Tensor& k_cache, at::Tensor& v_cache, int64_t n_heads);
// silu(gate) * up for gu = [gate | up] of shape [T, 2 hidden]; returns [T, hidden].
at::Tensor SwiGluCpu(const at::Tensor& gu);

}  // namespace raio::llm::internal
