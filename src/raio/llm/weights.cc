#include "raio/llm/weights.h"

#include "absl/strings/str_cat.h"

namespace raio::llm {
namespace {

struct Field {
  const char* name;
  const std::vector<float>* data;
  size_t size;
};

std::vector<Field> Fields(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const size_t L = c.n_layers, d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), v = c.vocab_size;
  std::vector<Field> f = {
      {"token_embedding", &w.token_embedding, v * d},
      {"rms_att", &w.rms_att, L * d},
      {"wq", &w.wq, L * d * d},
      {"wk", &w.wk, L * kv * d},
      {"wv", &w.wv, L * kv * d},
      {"wo", &w.wo, L * d * d},
      {"rms_ffn", &w.rms_ffn, L * d},
      {"w1", &w.w1, L * h * d},
      {"w2", &w.w2, L * d * h},
      {"w3", &w.w3, L * h * d},
      {"rms_final", &w.rms_final, d},
      {"classifier", &w.classifier, c.tied_embeddings ? 0 : v * d},
  };
  return f;
}

}  // namespace

void ModelWeights::Allocate() {
  for (const Field& f : Fields(*this)) {
    const_cast<std::vector<float>*>(f.data)->assign(f.size, 0.0f);
  }
}

absl::Status ModelWeights::Validate() const {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  for (const Field& f : Fields(*this)) {
    if (f.data->size() != f.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: ", f.name, " has ", f.data->size(), " floats, expected ", f.size));
    }
  }
  return absl::OkStatus();
}

std::vector<float> PermuteRotaryRows(const std::vector<float>& m, int64_t n_heads,
                                     int64_t head_size, int64_t cols, bool inverse) {
  std::vector<float> out(m.size());
  const int64_t half = head_size / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        int64_t meta = h * head_size + 2 * i + j;
        int64_t hf = h * head_size + j * half + i;
        int64_t from = inverse ? hf : meta;
        int64_t to = inverse ? meta : hf;
        std::copy_n(m.begin() + from * cols, cols, out.begin() + to * cols);
      }
    }
  }
  return out;
}

}  // namespace raio::llm
