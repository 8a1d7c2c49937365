#include "raio/train/sft.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace raio::train {

absl::StatusOr<TokenizedExample> TokenizeSftExample(const llm::Tokenizer& tokenizer,
                                                    const SftExample& example, int64_t max_len) {
  if (max_len < 2) return absl::InvalidArgumentError("sft: max_len must be >= 2");
  std::vector<int> prompt = tokenizer.Encode(example.prompt);
  std::vector<int> response = tokenizer.Encode(example.response);
  if (response.empty()) return absl::InvalidArgumentError("sft: empty response");
  TokenizedExample t;
  t.input_ids.push_back(tokenizer.bos_id());
  t.labels.push_back(kIgnoreIndex);
  for (int id : prompt) {
    t.input_ids.push_back(id);
    t.labels.push_back(kIgnoreIndex);
  }
  for (int id : response) {
    t.input_ids.push_back(id);
    t.labels.push_back(id);
  }
  t.input_ids.push_back(tokenizer.eos_id());
  t.labels.push_back(tokenizer.eos_id());
  if (static_cast<int64_t>(t.input_ids.size()) > max_len) {
    t.input_ids.resize(max_len);
    t.labels.resize(max_len);
  }
  // The loss at position t predicts labels[t + 1]: a response token must survive past the
  // first position.
  if (std::all_of(t.labels.begin() + 1, t.labels.end(),
                  [](int64_t l) { return l == kIgnoreIndex; })) {
    return absl::InvalidArgumentError(absl::StrCat("sft: the prompt fills max_len ", max_len,
                                                   "; no response token is left to learn"));
  }
  return t;
}

absl::StatusOr<SftBatch> CollateSft(std::span<const TokenizedExample> examples, int64_t pad_id) {
  if (examples.empty()) return absl::InvalidArgumentError("sft: empty batch");
  int64_t T = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].input_ids.size() != examples[i].labels.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sft: example ", i, " has ",
                                                     examples[i].input_ids.size(), " ids and ",
                                                     examples[i].labels.size(), " labels"));
    }
    T = std::max<int64_t>(T, static_cast<int64_t>(examples[i].input_ids.size()));
  }
  const int64_t B = static_cast<int64_t>(examples.size());
  SftBatch batch{torch::full({B, T}, pad_id, torch::kLong), torch::zeros({B, T}, torch::kLong),
                 torch::full({B, T}, kIgnoreIndex, torch::kLong)};
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto mask = batch.attention_mask.accessor<int64_t, 2>();
  auto labels = batch.labels.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const TokenizedExample& e = examples[b];
    for (size_t t = 0; t < e.input_ids.size(); ++t) {
      ids[b][t] = e.input_ids[t];
      mask[b][t] = 1;
      labels[b][t] = e.labels[t];
    }
  }
  return batch;
}

int64_t CountLossTokens(const SftBatch& batch) {
  const int64_t T = batch.labels.size(1);
  if (T < 2) return 0;
  return (batch.labels.narrow(1, 1, T - 1) != kIgnoreIndex).sum().item<int64_t>();
}

}  // namespace raio::train
