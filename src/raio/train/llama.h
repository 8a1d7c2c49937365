// The trainable Llama: the decoder of raio::llm (same ModelConfig, same ModelWeights and
// loaders, Meta's row layout and interleaved rotary pairs) as a torch::nn::Module with
// autograd, computing full causal attention over a right-padded batch [B, T] with an
// attention mask (no KV cache). Each projection is a LoraLinear: a base weight, frozen
// when LoRA adapters are attached (PEFT's LoRA, Hu et al. 2021), or trainable for full
// fine-tuning.
//
//   auto model = TrainableLlama::Create(loaded.weights, {.lora = LoraConfig{.r = 8}});
//   std::cout << (*model)->CountParameters().ToString();   // as PEFT prints it
//   torch::Tensor logits = *(*model)->Forward(batch.input_ids, batch.attention_mask);
//   torch::Tensor loss = CausalLmLoss(logits, batch.labels);
//
// Thread-safety: thread-compatible (a torch module: one thread trains it at a time).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/llm/lora_adapter.h"
#include "raio/llm/weights.h"

namespace raio::train {

using llm::LoraConfig;

// The label ignored by the loss (HF's and PyTorch's cross-entropy ignore_index).
inline constexpr int64_t kIgnoreIndex = -100;

// y = x W^T + scaling * B A dropout(x), with W [out, in], A [r, in], B [out, r] (PEFT's
// lora.Linear). Without an adapter, y = x W^T.
class LoraLinearImpl : public torch::nn::Module {
 public:
  explicit LoraLinearImpl(const torch::Tensor& weight);  // [out, in] float32, copied
  // Adds A (Kaiming-uniform with a = sqrt(5), PEFT's default) and B (zeros) and freezes W.
  void AddLora(const LoraConfig& config);
  // x [..., in] -> [..., out].
  torch::Tensor forward(const torch::Tensor& x);
  // W + scaling * B A (or W), detached: [out, in].
  torch::Tensor MergedWeight() const;

  torch::Tensor weight;                 // [out, in]
  torch::Tensor lora_A, lora_B;         // [r, in], [out, r]; undefined without an adapter
  double scaling = 0;                   // alpha / r
  torch::nn::Dropout dropout{nullptr};  // on the adapter's input
};
TORCH_MODULE(LoraLinear);

struct TrainableLlamaOptions {
  // LoRA adapters on the named modules of every layer, the base frozen; std::nullopt:
  // full fine-tuning (every weight trainable).
  std::optional<LoraConfig> lora;
};

// Parameter counts as PEFT's print_trainable_parameters reports them.
struct ParameterCounts {
  int64_t trainable = 0;
  int64_t total = 0;  // base and adapters; a tied classifier counts once
  double trainable_percent() const { return total > 0 ? 100.0 * trainable / total : 0; }
  // "trainable params: 2,560 || all params: 262,720 || trainable%: 0.9744"
  std::string ToString() const;
};

class TrainableLlama : public torch::nn::Module {
 public:
  // Builds the model from `weights` (float32 on the CPU). InvalidArgument on invalid
  // weights or a bad LoRA config.
  static absl::StatusOr<std::shared_ptr<TrainableLlama>> Create(
      const llm::ModelWeights& weights, const TrainableLlamaOptions& options);

  // input_ids [B, T] int64 in [0, vocab); attention_mask [B, T] (any integer or bool
  // dtype; nonzero = a real token), right-padded: token t of a row sits at position t.
  // Returns logits [B, T, vocab] float32 (rows at padding are computed but meaningless).
  // InvalidArgument on shapes, a token out of range or T past the context length;
  // Internal when libtorch throws. Blocks for the computation; records autograd when
  // grad mode is on.
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& input_ids,
                                        const torch::Tensor& attention_mask);

  ParameterCounts CountParameters() const;
  const llm::ModelConfig& config() const { return config_; }
  const std::optional<LoraConfig>& lora() const { return options_.lora; }

  // The adapters in the PEFT layout (names and q/k row order as PEFT saves them), for
  // llm::SaveLoraAdapter. FailedPrecondition without LoRA.
  absl::StatusOr<llm::LoraAdapter> ExportLoraAdapter(const std::string& base_model) const;
  // Copies an adapter's A/B into this model's adapters. FailedPrecondition without LoRA;
  // InvalidArgument when its config (r, target modules) or a shape differs from this
  // model's.
  absl::Status LoadLoraAdapter(const llm::LoraAdapter& adapter);
  // The current weights, adapters merged (for llm::SaveHfModel after full fine-tuning).
  llm::ModelWeights ExportWeights() const;

 private:
  struct Layer;
  TrainableLlama(const llm::ModelConfig& config, const TrainableLlamaOptions& options);
  absl::StatusOr<torch::Tensor> ForwardImpl(const torch::Tensor& input_ids,
                                            const torch::Tensor& attention_mask);

  llm::ModelConfig config_;
  TrainableLlamaOptions options_;
  torch::Tensor embed_tokens_;  // [vocab, dim]
  torch::Tensor lm_head_;       // [vocab, dim]; the embedding when tied
  torch::Tensor norm_;          // [dim]
  std::vector<std::shared_ptr<Layer>> layers_;
  torch::Tensor cos_, sin_;  // [max_seq_len, head_size / 2], buffers
};

// Next-token cross-entropy as HF's causal-LM loss: logits [B, T, V] predict labels
// [B, T] shifted by one (position t predicts labels[t + 1]); labels kIgnoreIndex are
// skipped; the mean over the rest. A scalar tensor (NaN when every label is ignored).
torch::Tensor CausalLmLoss(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace raio::train
