// LoRA adapters in the PEFT layout: saved from a trained TrainableLlama, read back, merged
// into the weights by raio::llm (with HF's q/k row order), and served by the LLM engine
// with the same greedy output as the trainable model with the adapter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../llm/test_util.h"
#include "raio/llm/engine.h"
#include "raio/llm/lora_adapter.h"
#include "raio/llm/model_dir.h"
#include "raio/train/llama.h"
#include "raio/train/sft.h"

namespace raio::train {
namespace {

const LoraConfig kLora{
    .r = 4,
    .alpha = 16,
    .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj"}};

class PeftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    torch::manual_seed(0);
    auto m = llm::LoadModelDir(llm::testing::ModelDir());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<llm::LoadedModel>(*std::move(m));
    auto t = TrainableLlama::Create(model_->weights, {.lora = kLora});
    ASSERT_TRUE(t.ok()) << t.status();
    trainable_ = *t;
  }
  // SFT steps on one pair, so that B is far from zero and the greedy text changes.
  void Train(int steps) {
    std::vector<TokenizedExample> ex = {*TokenizeSftExample(
        *model_->tokenizer, {"Once upon a time,", "a purple dragon ate Bob."}, 64)};
    SftBatch batch = *CollateSft(ex, 2);
    std::vector<torch::Tensor> params;
    for (const torch::Tensor& p : trainable_->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-2).weight_decay(0));
    trainable_->train();
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      CausalLmLoss(*trainable_->Forward(batch.input_ids, batch.attention_mask), batch.labels)
          .backward();
      opt.step();
    }
    trainable_->eval();
  }
  // Greedy decoding by the trainable model: argmax of a full forward, step by step.
  std::vector<int> Greedy(std::vector<int> ids, int n) {
    torch::NoGradGuard no_grad;
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
      torch::Tensor x = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).view({1, -1});
      torch::Tensor logits = *trainable_->Forward(x, torch::ones_like(x));
      const int next = static_cast<int>(logits[0][-1].argmax().item<int64_t>());
      out.push_back(next);
      ids.push_back(next);
    }
    return out;
  }
  std::vector<int> Prompt() const {
    std::vector<int> ids = {model_->tokenizer->bos_id()};
    for (int id : model_->tokenizer->Encode("Once upon a time,")) ids.push_back(id);
    return ids;
  }
  std::unique_ptr<llm::LoadedModel> model_;
  std::shared_ptr<TrainableLlama> trainable_;
  llm::testing::TempDir tmp_;
};

TEST_F(PeftTest, SavesThePeftLayoutAndLoadsItBack) {
  Train(5);
  auto adapter = trainable_->ExportLoraAdapter("stories260K");
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  const std::string dir = tmp_.path() + "/adapter";
  ASSERT_TRUE(llm::SaveLoraAdapter(*adapter, dir).ok());
  std::ifstream in(dir + "/adapter_config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 16.0);
  EXPECT_EQ(j["lora_dropout"], 0.0);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["base_model_name_or_path"], "stories260K");
  EXPECT_EQ(j["target_modules"].size(), 6u);

  auto loaded = llm::LoadLoraAdapter(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tensors.size(), 2u * 6 * 5);
  const auto& qa =
      loaded->tensors.at("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  const auto& kb =
      loaded->tensors.at("base_model.model.model.layers.4.self_attn.k_proj.lora_B.weight");
  const auto& db =
      loaded->tensors.at("base_model.model.model.layers.2.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(qa.shape, (std::vector<int64_t>{4, 64}));  // [r, in]
  EXPECT_EQ(kb.shape, (std::vector<int64_t>{32, 4}));  // [out, r]: 4 kv heads of 8
  EXPECT_EQ(db.shape, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(
      qa.data,
      adapter->tensors.at("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").data);

  // A fresh model with the loaded adapter computes what the trained one does.
  auto fresh = TrainableLlama::Create(model_->weights, {.lora = kLora});
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->LoadLoraAdapter(*loaded).ok());
  (*fresh)->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::tensor({1, 400, 30, 200, 7}, torch::kLong).view({1, -1});
  EXPECT_TRUE(torch::allclose(*(*fresh)->Forward(x, torch::ones_like(x)),
                              *trainable_->Forward(x, torch::ones_like(x)), 1e-6, 1e-6));
}

TEST_F(PeftTest, MergingTheSavedAdapterGivesTheTrainedWeights) {
  Train(5);
  auto adapter = trainable_->ExportLoraAdapter("stories260K");
  ASSERT_TRUE(adapter.ok());
  llm::ModelWeights merged = model_->weights;
  ASSERT_TRUE(llm::MergeLoraAdapter(*adapter, &merged).ok());
  const llm::ModelWeights want = trainable_->ExportWeights();  // W + s B A in Meta order
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  };
  // q/k lora_B rows went to HF order in the file and back to Meta order in the merge.
  EXPECT_LT(max_diff(merged.wq, want.wq), 1e-5f);
  EXPECT_LT(max_diff(merged.wk, want.wk), 1e-5f);
  EXPECT_LT(max_diff(merged.w2, want.w2), 1e-5f);
  EXPECT_GT(max_diff(merged.wq, model_->weights.wq), 1e-3f);
  EXPECT_EQ(merged.w3, model_->weights.w3);  // up_proj is not a target
}

TEST_F(PeftTest, TheEngineWithTheMergedAdapterDecodesAsTheTrainableModel) {
  Train(30);
  const std::string dir = tmp_.path() + "/adapter";
  ASSERT_TRUE(llm::SaveLoraAdapter(*trainable_->ExportLoraAdapter("stories260K"), dir).ok());
  llm::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 24;
  greedy.ignore_eos = true;
  auto generate = [&](const std::string& lora_dir) {
    auto m = llm::LoadModelDir(llm::testing::ModelDir(), lora_dir);
    EXPECT_TRUE(m.ok()) << m.status();
    auto engine = llm::Engine::Create(*std::move(m), {.kv_cache_bytes = 4 << 20});
    EXPECT_TRUE(engine.ok()) << engine.status();
    auto c = (*engine)->Generate(Prompt(), greedy);
    EXPECT_TRUE(c.ok()) << c.status();
    return c->token_ids;
  };
  const std::vector<int> adapted = generate(dir);
  EXPECT_EQ(adapted, Greedy(Prompt(), 24)) << model_->tokenizer->Decode(adapted);
  EXPECT_NE(adapted, generate("")) << "the adapter did not change the greedy text";
}

TEST_F(PeftTest, RefusesAdaptersThatDoNotFit) {
  auto adapter = trainable_->ExportLoraAdapter("stories260K");
  ASSERT_TRUE(adapter.ok());
  llm::LoraAdapter wrong_rank = *adapter;
  wrong_rank.config.r = 2;
  llm::ModelWeights w = model_->weights;
  EXPECT_EQ(llm::MergeLoraAdapter(wrong_rank, &w).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.wq, model_->weights.wq);  // unchanged
  EXPECT_EQ(trainable_->LoadLoraAdapter(wrong_rank).code(), absl::StatusCode::kInvalidArgument);
  llm::LoraAdapter deep = *adapter;
  deep.tensors["base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight"] = {{4, 64}, {}};
  deep.tensors["base_model.model.model.layers.9.self_attn.q_proj.lora_B.weight"] = {{64, 4}, {}};
  EXPECT_EQ(llm::MergeLoraAdapter(deep, &w).code(), absl::StatusCode::kInvalidArgument);

  const std::string dir = tmp_.path() + "/bad";
  ASSERT_TRUE(llm::SaveLoraAdapter(*adapter, dir).ok());
  {
    std::ofstream out(dir + "/adapter_config.json", std::ios::trunc);
    out << R"({"peft_type": "PREFIX_TUNING", "r": 4, "target_modules": ["q_proj"]})";
  }
  EXPECT_EQ(llm::LoadLoraAdapter(dir).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(llm::LoadLoraAdapter(tmp_.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  auto full = TrainableLlama::Create(model_->weights, {});
  EXPECT_EQ((*full)->ExportLoraAdapter("x").status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace raio::train
