// Weights of a Llama-architecture decoder in host memory, in Meta's (llama2.c's) layout:
// row-major [out][in] float32 matrices, layers stacked, and q/k rows in the interleaved
// rotary order (pairs 2i, 2i+1 rotate together). The loaders and converters of both
// on-disk layouts (llama2.c checkpoints, Hugging Face safetensors directories) read and
// write this one type, so none of them needs libtorch.
// A plain value type; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/llm/model_config.h"

namespace raio::llm {

struct ModelWeights {
  ModelConfig config;
  std::vector<float> token_embedding;  // [vocab][dim]
  std::vector<float> rms_att;          // [L][dim]
  std::vector<float> wq;               // [L][dim][dim]
  std::vector<float> wk;               // [L][kv_dim][dim]
  std::vector<float> wv;               // [L][kv_dim][dim]
  std::vector<float> wo;               // [L][dim][dim]
  std::vector<float> rms_ffn;          // [L][dim]
  std::vector<float> w1;               // [L][hidden][dim]  (HF gate_proj)
  std::vector<float> w2;               // [L][dim][hidden]  (HF down_proj)
  std::vector<float> w3;               // [L][hidden][dim]  (HF up_proj)
  std::vector<float> rms_final;        // [dim]
  std::vector<float> classifier;       // [vocab][dim]; empty when config.tied_embeddings

  // The classifier matrix actually used: `classifier`, or the embedding when tied.
  const std::vector<float>& Classifier() const {
    return config.tied_embeddings ? token_embedding : classifier;
  }
  // Resizes every array to the config's shapes (zero-filled).
  void Allocate();
  // InvalidArgument when the config is invalid or an array's size differs from its shape.
  [[nodiscard]] absl::Status Validate() const;
};

// Reads a llama2.c legacy checkpoint (seven int32 header fields, then float32 arrays;
// negative vocab_size: an untied classifier follows). NotFound if the file cannot be
// opened; InvalidArgument (naming the file) on a bad header or a size mismatch. Blocks
// on file I/O.
absl::StatusOr<ModelWeights> LoadLlama2cCheckpoint(const std::string& path);
// Writes `w` in the same format (the legacy RoPE tables are written as zeros, as the
// runtime recomputes them). Internal on an I/O failure.
absl::Status SaveLlama2cCheckpoint(const ModelWeights& w, const std::string& path);

// Reads a Hugging Face Llama directory: `config.json` and `model.safetensors` (F32,
// F16 or BF16 tensors named as in transformers' LlamaForCausalLM). q/k rows are
// un-permuted from HF's rotate-half order back to Meta's interleaved order.
// NotFound / InvalidArgument naming the file and field.
absl::StatusOr<ModelWeights> LoadHfModel(const std::string& dir);
// Writes `config.json` and `model.safetensors` (F32) into `dir` (created if missing),
// permuting q/k rows into HF's order. Does not write the tokenizer.
absl::Status SaveHfModel(const ModelWeights& w, const std::string& dir);

// HF's q/k row permutation for one [n_heads * head_size][cols] matrix: Meta row
// h*hs + 2i + j goes to HF row h*hs + j*hs/2 + i. `inverse` maps HF back to Meta.
std::vector<float> PermuteRotaryRows(const std::vector<float>& m, int64_t n_heads,
                                     int64_t head_size, int64_t cols, bool inverse);

}  // namespace raio::llm
