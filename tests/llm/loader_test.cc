#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "raio/llm/model_dir.h"
#include "raio/llm/safetensors.h"
#include "raio/llm/weights.h"
#include "test_util.h"

namespace raio::llm {
namespace {

using testing::ModelDir;
using testing::TempDir;

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_EQ(a.config.dim, b.config.dim);
  EXPECT_EQ(a.config.n_kv_heads, b.config.n_kv_heads);
  EXPECT_EQ(a.config.tied_embeddings, b.config.tied_embeddings);
  EXPECT_EQ(a.token_embedding, b.token_embedding);
  EXPECT_EQ(a.wq, b.wq);
  EXPECT_EQ(a.wk, b.wk);
  EXPECT_EQ(a.wv, b.wv);
  EXPECT_EQ(a.wo, b.wo);
  EXPECT_EQ(a.w1, b.w1);
  EXPECT_EQ(a.w2, b.w2);
  EXPECT_EQ(a.w3, b.w3);
  EXPECT_EQ(a.rms_att, b.rms_att);
  EXPECT_EQ(a.rms_ffn, b.rms_ffn);
  EXPECT_EQ(a.rms_final, b.rms_final);
  EXPECT_EQ(a.classifier, b.classifier);
}

TEST(Llama2cCheckpointTest, ReadsStories260KHeader) {
  absl::StatusOr<ModelWeights> w = LoadLlama2cCheckpoint(ModelDir() + "/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(w->Validate().ok());
}

TEST(Llama2cCheckpointTest, RejectsTruncatedFile) {
  TempDir tmp;
  std::ifstream in(ModelDir() + "/stories260K.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(tmp.path() + "/cut.bin", std::ios::binary) << bytes.substr(0, 5000);
  absl::StatusOr<ModelWeights> w = LoadLlama2cCheckpoint(tmp.path() + "/cut.bin");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadLlama2cCheckpoint(tmp.path() + "/none.bin").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RotaryPermutationTest, InverseUndoesForward) {
  std::vector<float> m(8 * 3);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i);
  std::vector<float> hf = PermuteRotaryRows(m, 2, 4, 3, false);
  // Head 0 rows in Meta order 0,1,2,3 are pairs (0,1),(2,3); HF puts 0,2 then 1,3.
  EXPECT_EQ(hf[1 * 3], m[2 * 3]);
  EXPECT_EQ(hf[2 * 3], m[1 * 3]);
  EXPECT_EQ(PermuteRotaryRows(hf, 2, 4, 3, true), m);
}

TEST(ModelDirTest, ConvertsLlama2cToHuggingFaceAndBack) {
  TempDir tmp;
  absl::StatusOr<LoadedModel> src = LoadModelDir(ModelDir());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->layout, ModelLayout::kLlama2c);
  EXPECT_EQ(src->name, "stories260K");
  const std::string hf = tmp.path() + "/hf";
  ASSERT_TRUE(ConvertModelDir(ModelDir(), hf, ModelLayout::kHuggingFace).ok());
  EXPECT_TRUE(std::filesystem::exists(hf + "/config.json"));
  EXPECT_TRUE(std::filesystem::exists(hf + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(hf + "/tokenizer.model"));
  absl::StatusOr<LoadedModel> hf_model = LoadModelDir(hf);
  ASSERT_TRUE(hf_model.ok()) << hf_model.status();
  EXPECT_EQ(hf_model->layout, ModelLayout::kHuggingFace);
  ExpectSameWeights(src->weights, hf_model->weights);
  // HF's q rows are permuted on disk, so the stored tensor differs from Meta's.
  absl::StatusOr<std::map<std::string, FloatTensor>> st =
      ReadSafetensors(hf + "/model.safetensors");
  ASSERT_TRUE(st.ok());
  const FloatTensor& q0 = st->at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q0.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_NE(q0.data, std::vector<float>(src->weights.wq.begin(), src->weights.wq.begin() + 4096));
  EXPECT_FALSE(st->contains("lm_head.weight"));  // tied

  const std::string back = tmp.path() + "/back";
  ASSERT_TRUE(ConvertModelDir(hf, back, ModelLayout::kLlama2c).ok());
  absl::StatusOr<LoadedModel> round = LoadModelDir(back);
  ASSERT_TRUE(round.ok()) << round.status();
  ExpectSameWeights(src->weights, round->weights);
}

// An untied classifier survives both formats: llama2.c's (negative vocab_size, the matrix
// at the end) and Hugging Face's (lm_head.weight, tie_word_embeddings false).
TEST(ModelDirTest, UntiedClassifierRoundTripsThroughBothFormats) {
  TempDir tmp;
  absl::StatusOr<LoadedModel> src = LoadModelDir(ModelDir());
  ASSERT_TRUE(src.ok()) << src.status();
  ModelWeights w = src->weights;
  w.config.tied_embeddings = false;
  w.classifier = w.token_embedding;
  for (size_t i = 0; i < w.classifier.size(); ++i) w.classifier[i] += 0.001f * (i % 7);
  ASSERT_TRUE(SaveLlama2cCheckpoint(w, tmp.path() + "/untied.bin").ok());
  absl::StatusOr<ModelWeights> l2c = LoadLlama2cCheckpoint(tmp.path() + "/untied.bin");
  ASSERT_TRUE(l2c.ok()) << l2c.status();
  EXPECT_FALSE(l2c->config.tied_embeddings);
  ExpectSameWeights(w, *l2c);
  ASSERT_TRUE(SaveHfModel(w, tmp.path() + "/hf").ok());
  absl::StatusOr<std::map<std::string, FloatTensor>> st =
      ReadSafetensors(tmp.path() + "/hf/model.safetensors");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->at("lm_head.weight").shape, (std::vector<int64_t>{512, 64}));
  absl::StatusOr<ModelWeights> hf = LoadHfModel(tmp.path() + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->config.tied_embeddings);
  ExpectSameWeights(w, *hf);
}

TEST(SafetensorsTest, ReadsHalfAndBfloat16) {
  TempDir tmp;
  // F16 1.0 = 0x3c00, -2.0 = 0xc000; BF16 1.5 = 0x3fc0.
  std::string header = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})";
  std::ofstream out(tmp.path() + "/t.safetensors", std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  const uint16_t data[3] = {0x3c00, 0xc000, 0x3fc0};
  out.write(reinterpret_cast<const char*>(data), 6);
  out.close();
  auto t = ReadSafetensors(tmp.path() + "/t.safetensors");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at("a").data, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(t->at("b").data, (std::vector<float>{1.5f}));
}

TEST(SafetensorsTest, RejectsOffsetsOutsideTheData) {
  TempDir tmp;
  std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::ofstream out(tmp.path() + "/t.safetensors", std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << "1234";
  out.close();
  EXPECT_EQ(ReadSafetensors(tmp.path() + "/t.safetensors").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelDirTest, EmptyDirectoryIsNotFound) {
  TempDir tmp;
  EXPECT_EQ(LoadModelDir(tmp.path()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace raio::llm
