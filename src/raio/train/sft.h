// Supervised fine-tuning data: prompt/response pairs tokenized with the model's tokenizer
// (raio::llm's), labels that put the loss on response tokens only (kIgnoreIndex on the
// prompt and on padding, as Hugging Face TRL's completion-only collator), and padded
// batches for TrainableLlama::Forward and CausalLmLoss.
//
// Thread-safety: free functions over value types; thread-compatible.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/llm/tokenizer.h"
#include "raio/train/llama.h"

namespace raio::train {

struct SftExample {
  std::string prompt;
  std::string response;
};

// One tokenized example: input_ids = [BOS] + Encode(prompt) + Encode(response) + [EOS],
// labels = kIgnoreIndex for BOS and the prompt, the token itself for the response and EOS.
// (Prompt and response are encoded separately, each with SentencePiece's dummy-prefix
// space, so the boundary is a word boundary.) Truncated to `max_len` tokens from the end
// of the response.
struct TokenizedExample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
};

// InvalidArgument when max_len < 2 or the response is empty, or when the truncated
// example keeps no response token (the prompt fills max_len).
absl::StatusOr<TokenizedExample> TokenizeSftExample(const llm::Tokenizer& tokenizer,
                                                    const SftExample& example, int64_t max_len);

// A right-padded batch: every tensor [B, T] int64, T the longest example's length.
struct SftBatch {
  torch::Tensor input_ids;       // padding: pad_id
  torch::Tensor attention_mask;  // 1 on tokens, 0 on padding
  torch::Tensor labels;          // kIgnoreIndex on the prompt and padding
};

// Pads `examples` into one batch. InvalidArgument when `examples` is empty or an example's
// labels and ids differ in length.
absl::StatusOr<SftBatch> CollateSft(std::span<const TokenizedExample> examples, int64_t pad_id);

// Response tokens that count in the loss (labels != kIgnoreIndex after the one-token
// shift of CausalLmLoss: every label but each row's first).
int64_t CountLossTokens(const SftBatch& batch);

}  // namespace raio::train
