// The trainable Llama on the bundled stories260K model: its logits against raio::llm's
// inference model, padding, LoRA at start (B = 0), where gradients go, parameter counts,
// and a few SFT steps lowering the loss.
#include "raio/train/llama.h"

#include <gtest/gtest.h>

#include "../llm/test_util.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "raio/train/sft.h"

namespace raio::train {
namespace {

class TrainableLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    torch::manual_seed(0);
    auto m = llm::LoadModelDir(llm::testing::ModelDir());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<llm::LoadedModel>(*std::move(m));
  }
  std::vector<int64_t> Tokens(const std::string& text) const {
    std::vector<int64_t> ids = {model_->tokenizer->bos_id()};
    for (int id : model_->tokenizer->Encode(text)) ids.push_back(id);
    return ids;
  }
  std::shared_ptr<TrainableLlama> Make(const TrainableLlamaOptions& options = {}) {
    auto m = TrainableLlama::Create(model_->weights, options);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : nullptr;
  }
  static torch::Tensor Row(const std::vector<int64_t>& ids) {
    return torch::tensor(ids, torch::kLong).view({1, -1});
  }
  std::unique_ptr<llm::LoadedModel> model_;
};

TEST_F(TrainableLlamaTest, LogitsEqualTheInferenceModelsOnStories260K) {
  const std::vector<int64_t> ids = Tokens("Once upon a time, there was a little girl named Lily.");
  auto trainable = Make();
  torch::NoGradGuard no_grad;
  auto logits = trainable->Forward(Row(ids), torch::ones({1, static_cast<int64_t>(ids.size())}));
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto inference = llm::LlamaModel::Create(model_->weights, {.block_size = 16, .num_blocks = 8});
  ASSERT_TRUE(inference.ok()) << inference.status();
  const std::vector<int> table = {0, 1, 2, 3, 4, 5, 6, 7};
  const int64_t V = model_->weights.config.vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {  // one token at a time: every position's logits
    const int token = static_cast<int>(ids[i]);
    llm::SequenceChunk chunk{std::span<const int>(&token, 1), static_cast<int>(i), table};
    auto want = (*inference)->Forward(std::span<const llm::SequenceChunk>(&chunk, 1));
    ASSERT_TRUE(want.ok()) << want.status();
    torch::Tensor got = (*logits)[0][static_cast<int64_t>(i)];
    torch::Tensor diff = (got - torch::from_blob(want->data(), {V}, torch::kFloat)).abs().max();
    EXPECT_LT(diff.item<float>(), 1e-4f) << "position " << i;
  }
}

TEST_F(TrainableLlamaTest, APaddedRowHasItsUnpaddedLogits) {
  const std::vector<int64_t> long_ids = Tokens("Once upon a time, there was a big dog.");
  const std::vector<int64_t> short_ids = Tokens("Lily was happy.");
  const int64_t T = static_cast<int64_t>(long_ids.size()),
                n = static_cast<int64_t>(short_ids.size());
  ASSERT_LT(n, T);
  torch::Tensor ids = torch::zeros({2, T}, torch::kLong), mask = torch::zeros({2, T}, torch::kLong);
  ids[0] = Row(long_ids)[0];
  mask[0].fill_(1);
  ids[1].narrow(0, 0, n).copy_(Row(short_ids)[0]);
  ids[1].narrow(0, n, T - n).fill_(2);  // padding with EOS
  mask[1].narrow(0, 0, n).fill_(1);
  auto trainable = Make();
  torch::NoGradGuard no_grad;
  auto batch = trainable->Forward(ids, mask);
  auto alone = trainable->Forward(Row(short_ids), torch::ones({1, n}));
  ASSERT_TRUE(batch.ok() && alone.ok());
  EXPECT_TRUE(torch::allclose((*batch)[1].narrow(0, 0, n), (*alone)[0], 1e-5, 1e-5));
  EXPECT_FALSE(torch::isnan(*batch).any().item<bool>());
}

TEST_F(TrainableLlamaTest, RefusesBadInput) {
  auto m = Make();
  EXPECT_EQ(
      m->Forward(torch::tensor({{1, 600}}, torch::kLong), torch::ones({1, 2})).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Forward(torch::tensor({{1, 2}}, torch::kLong), torch::ones({1, 3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Forward(torch::zeros({1, 513}, torch::kLong), torch::ones({1, 513})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainableLlama::Create(model_->weights, {.lora = LoraConfig{.r = 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TrainableLlama::Create(model_->weights, {.lora = LoraConfig{.target_modules = {"lm_head"}}})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(TrainableLlamaTest, LoraWithZeroBGivesTheBaseOutput) {
  const std::vector<int64_t> ids = Tokens("The cat sat on the mat.");
  const int64_t T = static_cast<int64_t>(ids.size());
  auto base = Make();
  auto lora = Make({.lora = LoraConfig{.r = 4,
                                       .alpha = 8,
                                       .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"}}});
  torch::NoGradGuard no_grad;
  auto a = base->Forward(Row(ids), torch::ones({1, T}));
  auto b = lora->Forward(Row(ids), torch::ones({1, T}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
}

TEST_F(TrainableLlamaTest, GradientsReachOnlyTheLoraParameters) {
  auto m = Make({.lora = LoraConfig{.r = 4, .alpha = 8, .dropout = 0.1}});
  m->train();
  const std::vector<int64_t> ids = Tokens("Tom had a red ball.");
  torch::Tensor x = Row(ids);
  auto logits = m->Forward(x, torch::ones_like(x));
  ASSERT_TRUE(logits.ok());
  CausalLmLoss(*logits, x).backward();
  int lora_params = 0;
  for (const auto& p : m->named_parameters()) {
    if (p.key().find("lora_") != std::string::npos) {
      ++lora_params;
      EXPECT_TRUE(p.value().requires_grad()) << p.key();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      // At start B = 0, so A's gradient (B^T times the output gradient) is zero too.
      if (p.key().find("lora_B") != std::string::npos) {
        EXPECT_GT(p.value().grad().abs().sum().item<float>(), 0) << p.key();
      }
    } else {
      EXPECT_FALSE(p.value().requires_grad()) << p.key();
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
    }
  }
  EXPECT_EQ(lora_params, 2 * 2 * 5);  // A and B of q_proj and v_proj in 5 layers
}

TEST_F(TrainableLlamaTest, CountsParametersAsPeftPrintsThem) {
  // stories260K: 260,032 weights (the README's 264,128 counts llama2.c's unused RoPE
  // tables). r = 8 on q_proj [64, 64] and v_proj [32, 64]: (8*64 + 64*8) + (8*64 + 32*8) =
  // 1,792 per layer, 8,960 in all.
  auto full = Make();
  EXPECT_EQ(full->CountParameters().total, 260032);
  EXPECT_EQ(full->CountParameters().trainable, 260032);
  auto lora = Make({.lora = LoraConfig{.r = 8, .alpha = 16}});
  EXPECT_EQ(lora->CountParameters().ToString(),
            "trainable params: 8,960 || all params: 268,992 || trainable%: 3.3310");
}

// A few AdamW steps on three prompt/response pairs; `options` picks LoRA or full
// fine-tuning. Returns the losses of the first and the last step.
std::pair<float, float> TrainSteps(TrainableLlama& m, const llm::Tokenizer& tok, int steps,
                                   double lr) {
  const std::vector<SftExample> data = {
      {"Once upon a time,", "there was a dragon named Bob."},
      {"The sky was", "green and purple."},
      {"Lily liked to", "eat blue apples."},
  };
  std::vector<TokenizedExample> examples;
  for (const SftExample& e : data) examples.push_back(*TokenizeSftExample(tok, e, 64));
  SftBatch batch = *CollateSft(examples, tok.eos_id());
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : m.parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(lr).weight_decay(0));
  m.train();
  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    torch::Tensor loss =
        CausalLmLoss(*m.Forward(batch.input_ids, batch.attention_mask), batch.labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  return {first, last};
}

TEST_F(TrainableLlamaTest, AFewLoraSftStepsLowerTheLoss) {
  auto m =
      Make({.lora = LoraConfig{
                .r = 8, .alpha = 16, .target_modules = {"q_proj", "v_proj", "o_proj", "up_proj"}}});
  auto [first, last] = TrainSteps(*m, *model_->tokenizer, 20, 1e-2);
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;
}

TEST_F(TrainableLlamaTest, FullFineTuningTrainsEveryWeight) {
  auto m = Make();
  const torch::Tensor before = m->named_parameters()["norm"].detach().clone();
  auto [first, last] = TrainSteps(*m, *model_->tokenizer, 10, 1e-3);
  EXPECT_LT(last, 0.8 * first) << "first " << first << " last " << last;
  EXPECT_FALSE(torch::equal(before, m->named_parameters()["norm"]));
  // The exported weights are the trained ones.
  llm::ModelWeights w = m->ExportWeights();
  ASSERT_TRUE(w.Validate().ok());
  EXPECT_NE(w.rms_final, model_->weights.rms_final);
}

}  // namespace
}  // namespace raio::train
