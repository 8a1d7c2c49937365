#include "evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "lora_sft.h"
#include "raio/llm/engine.h"
#include "raio/llm/lora_adapter.h"
#include "raio/llm/model_dir.h"
#include "raio/train/llama.h"

namespace lora {
namespace {

template <typename T>
T OrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) throw std::runtime_error(v.status().ToString());
  return *std::move(v);
}

}  // namespace

double MeanResponseLoss(const std::string& model_dir, const std::string& lora_dir,
                        const std::vector<raio::train::SftExample>& examples, int max_len,
                        int batch) {
  raio::llm::LoadedModel base = OrThrow(raio::llm::LoadModelDir(model_dir));
  raio::train::TrainableLlamaOptions options;
  raio::llm::LoraAdapter adapter;
  if (!lora_dir.empty()) {
    adapter = OrThrow(raio::llm::LoadLoraAdapter(lora_dir));
    options.lora = adapter.config;
  }
  auto model = OrThrow(raio::train::TrainableLlama::Create(base.weights, options));
  if (!lora_dir.empty()) {
    const absl::Status s = model->LoadLoraAdapter(adapter);
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  model->eval();
  torch::NoGradGuard no_grad;
  double loss_sum = 0, tokens = 0;
  for (size_t begin = 0; begin < examples.size(); begin += batch) {
    std::vector<raio::train::TokenizedExample> part;
    for (size_t i = begin; i < std::min(examples.size(), begin + batch); ++i) {
      part.push_back(OrThrow(TokenizeQuizExample(*base.tokenizer, examples[i], max_len)));
    }
    raio::train::SftBatch b = OrThrow(raio::train::CollateSft(part, base.tokenizer->eos_id()));
    torch::Tensor logits = OrThrow(model->Forward(b.input_ids, b.attention_mask));
    const double counted = static_cast<double>(raio::train::CountLossTokens(b));
    loss_sum += raio::train::CausalLmLoss(logits, b.labels).item<double>() * counted;
    tokens += counted;
  }
  return tokens > 0 ? loss_sum / tokens : 0;
}

std::vector<std::string> GreedyAnswers(const std::string& model_dir, const std::string& lora_dir,
                                       const std::vector<std::string>& prompts, int max_tokens) {
  auto engine = OrThrow(raio::llm::Engine::Create(
      OrThrow(raio::llm::LoadModelDir(model_dir, lora_dir)), {.kv_cache_bytes = 8 << 20}));
  raio::llm::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = max_tokens;
  greedy.stop = {"\n"};
  std::vector<std::string> texts(prompts.size());
  std::vector<absl::Status> errors(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int> ids = {engine->tokenizer().bos_id()};
    for (int id : engine->tokenizer().Encode(prompts[i])) ids.push_back(id);
    // Not started: the callbacks run on this thread, in Step() below.
    OrThrow(engine->AddRequest(std::move(ids), greedy,
                               [&texts, &errors, i](const raio::llm::RequestOutput& out) {
                                 texts[i] += out.text;
                                 if (!out.error.ok()) errors[i] = out.error;
                               }));
  }
  while (engine->Step()) {
  }
  for (const absl::Status& e : errors) {
    if (!e.ok()) throw std::runtime_error(e.ToString());
  }
  return texts;
}

}  // namespace lora
