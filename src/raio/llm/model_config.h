// Hyperparameters of a Llama-architecture decoder, shared by the loaders, the model
// runtime and the engine. A plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace raio::llm {

struct ModelConfig {
  int64_t dim = 0;          // hidden size (HF `hidden_size`)
  int64_t hidden_dim = 0;   // feed-forward size (HF `intermediate_size`)
  int64_t n_layers = 0;     // decoder layers
  int64_t n_heads = 0;      // query heads
  int64_t n_kv_heads = 0;   // key/value heads (grouped-query attention when < n_heads)
  int64_t vocab_size = 0;   // tokens
  int64_t max_seq_len = 0;  // context length in tokens (HF `max_position_embeddings`)
  double norm_eps = 1e-5;   // RMSNorm epsilon
  double rope_theta = 10000.0;
  bool tied_embeddings = true;  // classifier shares the token embedding
  int64_t bos_id = 1;
  int64_t eos_id = 2;

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }

  // InvalidArgument naming the field when a size is non-positive, dim is not a multiple
  // of n_heads, n_heads not a multiple of n_kv_heads, or the head size is odd.
  [[nodiscard]] absl::Status Validate() const;
};

}  // namespace raio::llm
