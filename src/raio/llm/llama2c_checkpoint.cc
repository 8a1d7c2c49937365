// llama2.c legacy checkpoint reader and writer (format in models/stories260K/README.md).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "raio/llm/weights.h"

namespace raio::llm {
namespace {

std::vector<float*> Arrays(ModelWeights& w) {
  return {w.token_embedding.data(),
          w.rms_att.data(),
          w.wq.data(),
          w.wk.data(),
          w.wv.data(),
          w.wo.data(),
          w.rms_ffn.data(),
          w.w1.data(),
          w.w2.data(),
          w.w3.data(),
          w.rms_final.data()};
}

std::vector<size_t> ArraySizes(const ModelWeights& w) {
  return {w.token_embedding.size(),
          w.rms_att.size(),
          w.wq.size(),
          w.wk.size(),
          w.wv.size(),
          w.wo.size(),
          w.rms_ffn.size(),
          w.w1.size(),
          w.w2.size(),
          w.w3.size(),
          w.rms_final.size()};
}

}  // namespace

absl::StatusOr<ModelWeights> LoadLlama2cCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open checkpoint ", path));
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  in.seekg(0);
  int32_t h[7];
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": shorter than the 28-byte header"));
  }
  ModelWeights w;
  ModelConfig& c = w.config;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tied_embeddings = h[5] > 0;
  c.vocab_size = h[5] < 0 ? -int64_t{h[5]} : h[5];
  c.max_seq_len = h[6];
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  w.Allocate();
  const int64_t rope = 2 * c.max_seq_len * c.head_size() / 2;
  int64_t floats = rope;
  for (size_t n : ArraySizes(w)) floats += n;
  floats += w.classifier.size();
  if (28 + 4 * floats != file_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file_size, " bytes, the header ", "implies ", 28 + 4 * floats));
  }
  std::vector<float*> arrays = Arrays(w);
  std::vector<size_t> sizes = ArraySizes(w);
  for (size_t i = 0; i < arrays.size(); ++i) {
    in.read(reinterpret_cast<char*>(arrays[i]), sizes[i] * sizeof(float));
  }
  in.seekg(rope * sizeof(float), std::ios::cur);
  if (!c.tied_embeddings) {
    in.read(reinterpret_cast<char*>(w.classifier.data()), w.classifier.size() * sizeof(float));
  }
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated"));
  return w;
}

absl::Status SaveLlama2cCheckpoint(const ModelWeights& w, const std::string& path) {
  if (absl::Status s = w.Validate(); !s.ok()) return s;
  const ModelConfig& c = w.config;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot create ", path));
  int32_t h[7] = {static_cast<int32_t>(c.dim),        static_cast<int32_t>(c.hidden_dim),
                  static_cast<int32_t>(c.n_layers),   static_cast<int32_t>(c.n_heads),
                  static_cast<int32_t>(c.n_kv_heads), static_cast<int32_t>(c.vocab_size),
                  static_cast<int32_t>(c.max_seq_len)};
  if (!c.tied_embeddings) h[5] = -h[5];
  out.write(reinterpret_cast<const char*>(h), sizeof(h));
  ModelWeights& mw = const_cast<ModelWeights&>(w);
  std::vector<float*> arrays = Arrays(mw);
  std::vector<size_t> sizes = ArraySizes(w);
  for (size_t i = 0; i < arrays.size(); ++i) {
    out.write(reinterpret_cast<const char*>(arrays[i]), sizes[i] * sizeof(float));
  }
  std::vector<float> rope(c.max_seq_len * c.head_size(), 0.0f);  // both legacy tables
  out.write(reinterpret_cast<const char*>(rope.data()), rope.size() * sizeof(float));
  if (!c.tied_embeddings) {
    out.write(reinterpret_cast<const char*>(w.classifier.data()),
              w.classifier.size() * sizeof(float));
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace raio::llm
