// LoRA supervised fine-tuning of a Llama model under raio::train: the training function
// each worker runs (TrainLoraSft, registered with RAIO_TRAIN_FUNCTION), its config, and the
// rows it reads from the Trainer's "train" dataset.
//
// Each worker loads the model, attaches LoRA adapters (the base frozen), broadcasts rank
// 0's adapters (PrepareModel), and trains with AdamW on its shard of the rows, averaging
// gradients over the ranks after each backward (GradientAllReducer). At the end of each
// epoch, and every `report_every_steps` steps if set, the ranks all-reduce their loss
// and token counts and report them (step, loss, tokens/s, ...); at the end of each epoch
// rank 0 also reports a checkpoint directory holding the adapter in the PEFT layout
// (adapter_config.json, adapter_model.safetensors, which raio's LLM engine loads) and the
// optimizer's state (optimizer.pt). A worker that starts with a checkpoint (a restart, or
// a run resumed by name) loads both and goes on at the next epoch.
//
// Thread-safety: TrainLoraSft runs on one thread of a worker process.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/llm/tokenizer.h"
#include "raio/train/context.h"
#include "raio/train/llama.h"
#include "raio/train/sft.h"

namespace lora {

// The training function's config (the Trainer's train_loop_config, as JSON).
struct SftConfig {
  std::string model_dir;  // llama2.c or Hugging Face model directory (raio::llm::LoadModelDir)
  int epochs = 1;
  int global_batch = 16;       // examples per optimizer step over all ranks
  double lr = 1e-2;            // AdamW, no weight decay, decayed linearly to 0 over the run
  uint64_t seed = 0;           // adapter initialisation and per-epoch shuffles
  int max_len = 64;            // tokens per example at most (prompt + response + BOS/EOS)
  int report_every_steps = 0;  // reports within an epoch; 0: only at its end
  raio::train::LoraConfig lora;

  nlohmann::json ToJson() const;
  // Throws nlohmann::json::exception on a missing or mistyped field.
  static SftConfig FromJson(const nlohmann::json& j);
};

// raio::train::TokenizeSftExample with the response ended by BOS rather than EOS. Why:
// stories260K never saw EOS in pretraining (TinyStories separates stories with BOS), so
// EOS's embedding row, which the tied classifier shares, is all but equal (cosine > 0.999)
// to those of the ~240 byte tokens it never saw either; LoRA leaves the embedding frozen,
// so no adapter can make EOS likelier than its twins, and greedy decoding ends answers
// with a stray byte. BOS is a trained token, and raio's engine stops at a generated BOS
// as at EOS. Same errors as TokenizeSftExample.
absl::StatusOr<raio::train::TokenizedExample> TokenizeQuizExample(
    const raio::llm::Tokenizer& tokenizer, const raio::train::SftExample& example, int max_len);

// One row of the "train" dataset: {"prompt": ..., "response": ...} as a JSON line.
std::string SftRow(const std::string& prompt, const std::string& response);

// Metrics each report carries: epoch (0-based), step (optimizer steps so far, all epochs),
// total_steps, loss (mean over the response tokens of every rank since the previous
// report), tokens_per_s (all ranks' tokens, padding excluded), elapsed_s (since this
// worker's loop started), steps_this_start; epoch reports also epoch_loss and checkpoint 1.
void TrainLoraSft(raio::train::TrainContext& ctx);

}  // namespace lora
