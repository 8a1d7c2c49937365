// LoRA adapters in the Hugging Face PEFT layout, shared by the LLM engine (which merges
// them into a model's weights at load) and the training library (which trains and saves
// them). An adapter directory holds `adapter_config.json` (peft_type "LORA", r,
// lora_alpha, lora_dropout, target_modules, bias, base_model_name_or_path, task_type) and
// `adapter_model.safetensors` with, for each adapted module,
// `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight` [r, in] and
// `...lora_B.weight` [out, r]. The update is W' = W + (lora_alpha / r) B A (Hu et al.,
// "LoRA: Low-Rank Adaptation of Large Language Models", 2021).
//
// Tensors here are in the PEFT (Hugging Face) row order: q_proj/k_proj lora_B rows follow
// HF's rotate-half layout; MergeLoraAdapter permutes them into ModelWeights' Meta order.
// No libtorch. Thread-safety: free functions over value types; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/llm/safetensors.h"
#include "raio/llm/weights.h"

namespace raio::llm {

// The modules LoRA may target, named as in transformers' LlamaForCausalLM (and PEFT's
// `target_modules`).
inline constexpr std::array<std::string_view, 7> kLoraModules = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

struct LoraConfig {
  int64_t r = 8;         // rank (> 0)
  double alpha = 8;      // lora_alpha; the update is scaled by alpha / r
  double dropout = 0.0;  // lora_dropout, on the adapter's input, in training only; [0, 1)
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};  // names from kLoraModules

  double scaling() const { return alpha / static_cast<double>(r); }
  // InvalidArgument when r <= 0, dropout outside [0, 1), no target module, or a name that
  // is not in kLoraModules (or repeated).
  [[nodiscard]] absl::Status Validate() const;
};

struct LoraAdapter {
  LoraConfig config;
  std::string base_model_name_or_path;
  // PEFT tensor names (LoraTensorName) to float32 tensors, PEFT row order.
  std::map<std::string, FloatTensor> tensors;
};

// "self_attn" for q/k/v/o_proj, "mlp" for gate/up/down_proj.
std::string_view LoraModuleParent(std::string_view module);
// `base_model.model.model.layers.{layer}.{parent}.{module}.lora_{A|B}.weight`.
std::string LoraTensorName(int64_t layer, std::string_view module, bool lora_a);

// Reads an adapter directory. NotFound when a file is missing; InvalidArgument (naming
// the file and field) on a config PEFT would not describe as plain LoRA (peft_type other
// than LORA, bias other than "none", fan_in_fan_out, DoRA, a regex target_modules), a
// tensor name that is not a LoRA A/B of a known module, an A without its B, or A/B ranks
// that differ from r. With use_rslora the scaling alpha / sqrt(r) is folded into `alpha`
// (alpha * sqrt(r)), so that scaling() stays right. Blocks on file I/O.
absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir);

// Writes `adapter_config.json` and `adapter_model.safetensors` (F32) into `dir` (created
// if missing). InvalidArgument on a bad config; Internal on an I/O failure.
absl::Status SaveLoraAdapter(const LoraAdapter& adapter, const std::string& dir);

// Folds the adapter into `weights` (W += scaling * B A, for every adapted module of every
// layer), permuting q/k lora_B rows from HF order into the Meta order ModelWeights keeps.
// InvalidArgument (naming the tensor) when a layer is out of range or a shape does not
// fit the model; `weights` is unchanged then. O(out * in * r) per module, on the calling
// thread.
absl::Status MergeLoraAdapter(const LoraAdapter& adapter, ModelWeights* weights);

}  // namespace raio::llm
