// SFT data: tokenized prompt/response pairs with the loss on the response only, padded
// batches, and the causal-LM loss ignoring the prompt and the padding.
#include "raio/train/sft.h"

#include <gtest/gtest.h>

#include "../llm/test_util.h"
#include "raio/llm/model_dir.h"

namespace raio::train {
namespace {

class SftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = llm::LoadModelDir(llm::testing::ModelDir());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<llm::LoadedModel>(*std::move(m));
  }
  const llm::Tokenizer& tok() const { return *model_->tokenizer; }
  std::unique_ptr<llm::LoadedModel> model_;
};

TEST_F(SftTest, LabelsMaskTheBosAndThePrompt) {
  const SftExample e{"Once upon a time,", "there was a cat."};
  auto t = TokenizeSftExample(tok(), e, 64);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int> prompt = tok().Encode(e.prompt), response = tok().Encode(e.response);
  std::vector<int64_t> ids = {1}, labels = {kIgnoreIndex};
  for (int id : prompt) {
    ids.push_back(id);
    labels.push_back(kIgnoreIndex);
  }
  for (int id : response) {
    ids.push_back(id);
    labels.push_back(id);
  }
  ids.push_back(2);
  labels.push_back(2);
  EXPECT_EQ(t->input_ids, ids);
  EXPECT_EQ(t->labels, labels);
  EXPECT_EQ(tok().Decode(std::vector<int>(response.begin(), response.end())), "there was a cat.");
}

TEST_F(SftTest, BatchesPadWithIgnoredLabelsAndAZeroMask) {
  std::vector<TokenizedExample> ex = {*TokenizeSftExample(tok(), {"Lily saw", "a big dog."}, 64),
                                      *TokenizeSftExample(tok(), {"The", "end."}, 64)};
  auto batch = CollateSft(ex, /*pad_id=*/0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const int64_t T = static_cast<int64_t>(std::max(ex[0].input_ids.size(), ex[1].input_ids.size()));
  ASSERT_EQ(batch->input_ids.sizes(), (std::vector<int64_t>{2, T}));
  int64_t expected_loss_tokens = 0;
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t n = static_cast<int64_t>(ex[b].input_ids.size());
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < n;
      EXPECT_EQ(batch->attention_mask[b][t].item<int64_t>(), real ? 1 : 0);
      EXPECT_EQ(batch->input_ids[b][t].item<int64_t>(), real ? ex[b].input_ids[t] : 0);
      EXPECT_EQ(batch->labels[b][t].item<int64_t>(), real ? ex[b].labels[t] : kIgnoreIndex);
      if (real && ex[b].labels[t] != kIgnoreIndex) ++expected_loss_tokens;
    }
  }
  // The response tokens and EOS of each row, nothing of the prompts or the padding.
  const int64_t responses =
      static_cast<int64_t>(tok().Encode("a big dog.").size() + tok().Encode("end.").size() + 2);
  EXPECT_EQ(expected_loss_tokens, responses);
  EXPECT_EQ(CountLossTokens(*batch), responses);
}

TEST_F(SftTest, TheLossAveragesOverResponseTokensOnly) {
  std::vector<TokenizedExample> ex = {*TokenizeSftExample(tok(), {"Lily saw", "a big dog."}, 64),
                                      *TokenizeSftExample(tok(), {"The", "end."}, 64)};
  SftBatch batch = *CollateSft(ex, 0);
  torch::manual_seed(1);
  const int64_t B = 2, T = batch.labels.size(1), V = 512;
  torch::Tensor logits = torch::randn({B, T, V});
  // By hand: position t predicts labels[t + 1], over unmasked labels only.
  torch::Tensor logp = logits.log_softmax(-1);
  double sum = 0;
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int64_t label = batch.labels[b][t + 1].item<int64_t>();
      if (label == kIgnoreIndex) continue;
      sum -= logp[b][t][label].item<double>();
      ++n;
    }
  }
  EXPECT_EQ(n, CountLossTokens(batch));
  EXPECT_NEAR(CausalLmLoss(logits, batch.labels).item<double>(), sum / n, 1e-5);
  // Changing logits at prompt or padding positions leaves the loss unchanged.
  torch::Tensor changed = logits.clone();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      if (batch.labels[b][t + 1].item<int64_t>() == kIgnoreIndex) changed[b][t].fill_(5.0);
    }
  }
  changed[0][T - 1].fill_(7.0);  // the last position predicts nothing
  EXPECT_NEAR(CausalLmLoss(changed, batch.labels).item<double>(), sum / n, 1e-5);
}

TEST_F(SftTest, TruncatesTheResponseAndRefusesAPromptThatFillsTheContext) {
  auto t = TokenizeSftExample(tok(), {"Hi", "one two three four five six seven"}, 6);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->input_ids.size(), 6u);
  EXPECT_EQ(t->labels.size(), 6u);
  EXPECT_EQ(TokenizeSftExample(tok(), {"a long long long prompt", "x"}, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenizeSftExample(tok(), {"p", ""}, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CollateSft({}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace raio::train
