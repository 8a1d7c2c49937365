// A model directory in either layout, recognised by its files:
//  - Hugging Face: `config.json`, `model.safetensors`, `tokenizer.model`;
//  - llama2.c: a checkpoint `*.bin` (the largest .bin file) and a tokenizer: a
//    SentencePiece `*.model` if there is one, else the other `.bin` (llama2.c format).
// Thread-safety: free functions; the result is a value.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "raio/llm/tokenizer.h"
#include "raio/llm/weights.h"

namespace raio::llm {

enum class ModelLayout { kHuggingFace, kLlama2c };

struct LoadedModel {
  ModelLayout layout;
  std::string name;  // the directory's base name, served as the OpenAI model id
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads weights and tokenizer from `dir`. With a `lora_dir`, the PEFT LoRA adapter there
// (lora_adapter.h) is merged into the weights (W += alpha / r * B A), so that the engine
// serves the adapted model at the base model's speed. NotFound when `dir` holds neither
// layout; otherwise the loaders' and the merge's errors (naming the adapter directory).
// Blocks on file I/O.
absl::StatusOr<LoadedModel> LoadModelDir(const std::string& dir, const std::string& lora_dir = "");

// Converts the model in `src_dir` (either layout) to `layout` in `dst_dir` (created),
// copying the tokenizer (SentencePiece `tokenizer.model` for Hugging Face; for llama2.c
// `model.bin` plus the source's tokenizer file). Used by `raio llm convert`.
absl::Status ConvertModelDir(const std::string& src_dir, const std::string& dst_dir,
                             ModelLayout layout);

}  // namespace raio::llm
