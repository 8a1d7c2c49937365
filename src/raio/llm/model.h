// The Llama-architecture decoder on libtorch (RMSNorm, rotary embeddings, grouped-query
// attention, SwiGLU, tied or untied classifier), computing a batch of sequences of
// different lengths and positions in one forward pass over a paged KV cache.
//
// The KV cache is one pool of fixed-size blocks per layer (`num_blocks * block_size`
// token slots of [n_kv_heads][head_size] float32 for keys and for values); which block
// holds which part of a sequence is the caller's business (the engine's block tables).
// libtorch stays out of this header so that the engine and server compile without it.
//
// Thread-safety: thread-compatible. Forward mutates the KV cache: one thread at a time
// (the engine's step loop).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/llm/weights.h"

namespace raio::llm {

// One sequence's share of a forward pass: `tokens` are its tokens at positions
// [start_pos, start_pos + tokens.size()), whose keys and values are written to the cache;
// attention reads positions [0, start_pos + tokens.size()) through `block_table`
// (physical block of each logical block, covering at least that many positions).
struct SequenceChunk {
  std::span<const int> tokens;       // >= 1 token ids in [0, vocab)
  int start_pos = 0;                 // tokens already in the cache for this sequence
  std::span<const int> block_table;  // physical block ids in [0, num_blocks)
};

class LlamaModel {
 public:
  struct Options {
    std::string device = "cpu";  // a torch device string: "cpu", "cuda", "cuda:1"
    int block_size = 16;         // tokens per KV cache block
    int num_blocks = 0;          // blocks in the pool (> 0)
    bool float64 = false;        // compute in float64 (tests); float32 otherwise
    // Use the device-generic libtorch operators on the CPU too, instead of the CPU loop
    // kernels (paged_attention.h); tests run both.
    bool generic_ops = false;
  };

  // Copies `weights` to the device and allocates the KV cache. InvalidArgument on bad
  // weights or options (a GPU index CUDA does not see); Unavailable when the device is not
  // in this libtorch build; ResourceExhausted when the device cannot hold the model.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const ModelWeights& weights,
                                                            const Options& options);
  // Bytes of KV cache one block takes (keys and values of every layer, float32).
  // (float64 models take twice as much.)
  static int64_t BlockBytes(const ModelConfig& config, int block_size);
  ~LlamaModel();

  // Runs one forward pass over `batch` and returns float32 logits [batch.size()][vocab]
  // of each sequence's last token, row-major, on the host. InvalidArgument when a chunk
  // is empty, a token or block id is out of range, a block table is too short or the
  // positions pass the context length; Internal when libtorch fails (out of device
  // memory, a CUDA error). Blocks for the computation.
  absl::StatusOr<std::vector<float>> Forward(std::span<const SequenceChunk> batch);

  const ModelConfig& config() const;
  int block_size() const;
  int num_blocks() const;

 private:
  struct Impl;
  explicit LlamaModel(std::unique_ptr<Impl> impl);
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Build(const ModelWeights& weights,
                                                           const Options& options,
                                                           std::unique_ptr<Impl> impl);
  absl::StatusOr<std::vector<float>> ForwardImpl(std::span<const SequenceChunk> batch);
  std::unique_ptr<Impl> impl_;
};

// Sets libtorch's intra-op thread count (benchmarks and tests use 1: at this model
// size, per-op overhead dominates and threads only add contention).
void SetTorchThreads(int n);

}  // namespace raio::llm
