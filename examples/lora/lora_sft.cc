#include "lora_sft.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "raio/llm/lora_adapter.h"
#include "raio/llm/model_dir.h"
#include "raio/train/data_parallel.h"
#include "raio/train/sft.h"

namespace lora {
namespace fs = std::filesystem;

nlohmann::json SftConfig::ToJson() const {
  return {{"model_dir", model_dir},
          {"epochs", epochs},
          {"global_batch", global_batch},
          {"lr", lr},
          {"seed", seed},
          {"max_len", max_len},
          {"report_every_steps", report_every_steps},
          {"lora",
           {{"r", lora.r},
            {"alpha", lora.alpha},
            {"dropout", lora.dropout},
            {"target_modules", lora.target_modules}}}};
}

SftConfig SftConfig::FromJson(const nlohmann::json& j) {
  SftConfig c;
  c.model_dir = j.at("model_dir").get<std::string>();
  c.epochs = j.at("epochs").get<int>();
  c.global_batch = j.at("global_batch").get<int>();
  c.lr = j.at("lr").get<double>();
  c.seed = j.at("seed").get<uint64_t>();
  c.max_len = j.at("max_len").get<int>();
  c.report_every_steps = j.at("report_every_steps").get<int>();
  const nlohmann::json& l = j.at("lora");
  c.lora.r = l.at("r").get<int64_t>();
  c.lora.alpha = l.at("alpha").get<double>();
  c.lora.dropout = l.at("dropout").get<double>();
  c.lora.target_modules = l.at("target_modules").get<std::vector<std::string>>();
  return c;
}

std::string SftRow(const std::string& prompt, const std::string& response) {
  return nlohmann::json{{"prompt", prompt}, {"response", response}}.dump();
}

namespace {

template <typename T>
T OrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) throw std::runtime_error(v.status().ToString());
  return *std::move(v);
}

void OrThrow(const absl::Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace

absl::StatusOr<raio::train::TokenizedExample> TokenizeQuizExample(
    const raio::llm::Tokenizer& tokenizer, const raio::train::SftExample& example, int max_len) {
  absl::StatusOr<raio::train::TokenizedExample> t =
      raio::train::TokenizeSftExample(tokenizer, example, max_len);
  if (t.ok() && t->labels.back() == tokenizer.eos_id()) {  // not truncated
    t->input_ids.back() = tokenizer.bos_id();
    t->labels.back() = tokenizer.bos_id();
  }
  return t;
}

void TrainLoraSft(raio::train::TrainContext& ctx) {
  const SftConfig cfg = SftConfig::FromJson(ctx.GetConfig());
  const int world = ctx.GetWorldSize(), rank = ctx.GetWorldRank();
  torch::manual_seed(cfg.seed);  // the adapters' A; PrepareModel copies rank 0's anyway

  raio::llm::LoadedModel base = OrThrow(raio::llm::LoadModelDir(cfg.model_dir));
  std::shared_ptr<raio::train::TrainableLlama> model =
      OrThrow(raio::train::TrainableLlama::Create(base.weights, {.lora = cfg.lora}));
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(cfg.lr).weight_decay(0.0));

  // This rank's rows, tokenized once.
  std::vector<raio::train::TokenizedExample> examples;
  for (const std::string& row : ctx.GetDatasetShard("train")) {
    const nlohmann::json j = nlohmann::json::parse(row);
    examples.push_back(OrThrow(TokenizeQuizExample(
        *base.tokenizer, {j.at("prompt").get<std::string>(), j.at("response").get<std::string>()},
        cfg.max_len)));
  }
  if (examples.empty()) throw std::runtime_error("rank " + std::to_string(rank) + ": no rows");
  // Shards have equal sizes (the Trainer pads them), so every rank takes as many steps.
  const int local_batch = std::max(1, cfg.global_batch / world);
  const int64_t n = static_cast<int64_t>(examples.size());
  const int64_t steps_per_epoch = (n + local_batch - 1) / local_batch;
  const int64_t total_steps = steps_per_epoch * cfg.epochs;

  int start_epoch = 0;
  if (const auto& checkpoint = ctx.GetCheckpoint()) {
    OrThrow(model->LoadLoraAdapter(OrThrow(raio::llm::LoadLoraAdapter(checkpoint->path))));
    const fs::path state = fs::path(checkpoint->path) / "optimizer.pt";
    if (fs::exists(state)) torch::load(optimizer, state.string());
    start_epoch = static_cast<int>(checkpoint->metrics.at("epoch")) + 1;
  }
  raio::train::GradientAllReducer reducer = raio::train::PrepareModel(ctx, *model);

  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Sums since the last report (loss x tokens, loss tokens, input tokens) and since the
  // epoch began; all-reduced over the ranks at each report.
  double loss_sum = 0, loss_tokens = 0, tokens = 0;
  double epoch_loss_sum = 0, epoch_loss_tokens = 0;
  auto last_report = t0;
  int64_t step = start_epoch * steps_per_epoch, steps_this_start = 0;
  model->train();
  for (int epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::mt19937_64 rng(cfg.seed * 1000003 + static_cast<uint64_t>(epoch) * 7919 + rank);
    for (int64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    epoch_loss_sum = epoch_loss_tokens = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      std::vector<raio::train::TokenizedExample> batch_examples;
      for (int64_t i = s * local_batch; i < std::min(n, (s + 1) * local_batch); ++i) {
        batch_examples.push_back(examples[order[i]]);
      }
      raio::train::SftBatch batch =
          OrThrow(raio::train::CollateSft(batch_examples, base.tokenizer->eos_id()));
      // Linear decay to 0 over the whole run (the same on every rank and after a resume).
      for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
        static_cast<torch::optim::AdamWOptions&>(group.options())
            .lr(cfg.lr * (1.0 - static_cast<double>(step) / static_cast<double>(total_steps)));
      }
      optimizer.zero_grad();
      torch::Tensor logits = OrThrow(model->Forward(batch.input_ids, batch.attention_mask));
      torch::Tensor loss = raio::train::CausalLmLoss(logits, batch.labels);
      loss.backward();
      reducer.AllReduce();
      optimizer.step();
      ++step;
      ++steps_this_start;
      const double counted = static_cast<double>(raio::train::CountLossTokens(batch));
      loss_sum += loss.item<double>() * counted;
      loss_tokens += counted;
      tokens += batch.attention_mask.sum().item<double>();

      const bool end_of_epoch = s + 1 == steps_per_epoch;
      if (!end_of_epoch && (cfg.report_every_steps <= 0 || step % cfg.report_every_steps != 0)) {
        continue;
      }
      // Every rank reaches this point at the same steps: the all-reduce is collective.
      torch::Tensor sums = torch::tensor({loss_sum, loss_tokens, tokens}, torch::kDouble);
      if (world > 1) {
        std::vector<torch::Tensor> t = {sums};
        ctx.GetProcessGroup().allreduce(t)->wait();
      }
      const double interval_s = std::max(1e-9, since(last_report));
      last_report = std::chrono::steady_clock::now();
      epoch_loss_sum += sums[0].item<double>();
      epoch_loss_tokens += sums[1].item<double>();
      raio::train::Metrics metrics = {
          {"epoch", epoch},
          {"step", static_cast<double>(step)},
          {"total_steps", static_cast<double>(total_steps)},
          {"loss", sums[0].item<double>() / std::max(1.0, sums[1].item<double>())},
          {"tokens_per_s", sums[2].item<double>() / interval_s},
          {"elapsed_s", since(t0)},
          {"steps_this_start", static_cast<double>(steps_this_start)}};
      loss_sum = loss_tokens = tokens = 0;
      if (!end_of_epoch) {
        ctx.Report(metrics);
        continue;
      }
      metrics["epoch_loss"] = epoch_loss_sum / std::max(1.0, epoch_loss_tokens);
      metrics["checkpoint"] = 1;
      if (rank != 0) {
        ctx.Report(metrics);
        continue;
      }
      const fs::path dir =
          fs::temp_directory_path() / ("raio_lora_checkpoint_" + std::to_string(::getpid()));
      fs::remove_all(dir);
      OrThrow(
          raio::llm::SaveLoraAdapter(OrThrow(model->ExportLoraAdapter(base.name)), dir.string()));
      torch::save(optimizer, (dir / "optimizer.pt").string());
      ctx.Report(metrics, dir.string());
      fs::remove_all(dir);
    }
  }
}

}  // namespace lora

RAIO_TRAIN_FUNCTION(lora::TrainLoraSft);
