// Hugging Face Llama directory reader and writer (config.json + model.safetensors).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "raio/llm/safetensors.h"
#include "raio/llm/weights.h"

namespace raio::llm {
namespace {

// One HF tensor of each layer and the slice of the stacked Meta array it fills.
struct LayerTensor {
  const char* suffix;
  std::vector<float> ModelWeights::*array;
  bool rotary_q;  // permuted with n_heads
  bool rotary_k;  // permuted with n_kv_heads
};

constexpr LayerTensor kLayerTensors[] = {
    {"self_attn.q_proj.weight", &ModelWeights::wq, true, false},
    {"self_attn.k_proj.weight", &ModelWeights::wk, false, true},
    {"self_attn.v_proj.weight", &ModelWeights::wv, false, false},
    {"self_attn.o_proj.weight", &ModelWeights::wo, false, false},
    {"mlp.gate_proj.weight", &ModelWeights::w1, false, false},
    {"mlp.down_proj.weight", &ModelWeights::w2, false, false},
    {"mlp.up_proj.weight", &ModelWeights::w3, false, false},
    {"input_layernorm.weight", &ModelWeights::rms_att, false, false},
    {"post_attention_layernorm.weight", &ModelWeights::rms_ffn, false, false},
};

std::vector<int64_t> LayerShape(const ModelConfig& c, const char* suffix) {
  const std::string s = suffix;
  if (s.starts_with("self_attn.q") || s.starts_with("self_attn.o")) return {c.dim, c.dim};
  if (s.starts_with("self_attn.")) return {c.kv_dim(), c.dim};
  if (s == "mlp.down_proj.weight") return {c.dim, c.hidden_dim};
  if (s.starts_with("mlp.")) return {c.hidden_dim, c.dim};
  return {c.dim};
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadHfModel(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  std::ifstream cin(config_path);
  if (!cin) return absl::NotFoundError(absl::StrCat("cannot open ", config_path));
  nlohmann::json j = nlohmann::json::parse(cin, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(config_path + ": not a JSON object");
  ModelWeights w;
  ModelConfig& c = w.config;
  try {
    c.dim = j.at("hidden_size").get<int64_t>();
    c.hidden_dim = j.at("intermediate_size").get<int64_t>();
    c.n_layers = j.at("num_hidden_layers").get<int64_t>();
    c.n_heads = j.at("num_attention_heads").get<int64_t>();
    c.n_kv_heads = j.value("num_key_value_heads", c.n_heads);
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.max_seq_len = j.at("max_position_embeddings").get<int64_t>();
    c.norm_eps = j.value("rms_norm_eps", 1e-6);
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.tied_embeddings = j.value("tie_word_embeddings", false);
    c.bos_id = j.value("bos_token_id", int64_t{1});
    c.eos_id = j.value("eos_token_id", int64_t{2});
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", e.what()));
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", s.message()));
  }
  const std::string st_path = dir + "/model.safetensors";
  absl::StatusOr<std::map<std::string, FloatTensor>> tensors = ReadSafetensors(st_path);
  if (!tensors.ok()) return tensors.status();
  auto take = [&](const std::string& name,
                  const std::vector<int64_t>& shape) -> absl::StatusOr<std::vector<float>> {
    auto it = tensors->find(name);
    if (it == tensors->end()) {
      return absl::InvalidArgumentError(absl::StrCat(st_path, ": missing tensor ", name));
    }
    if (it->second.shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(st_path, ": tensor ", name, " has the wrong shape"));
    }
    return std::move(it->second.data);
  };
  w.Allocate();
  auto emb = take("model.embed_tokens.weight", {c.vocab_size, c.dim});
  if (!emb.ok()) return emb.status();
  w.token_embedding = *std::move(emb);
  auto norm = take("model.norm.weight", {c.dim});
  if (!norm.ok()) return norm.status();
  w.rms_final = *std::move(norm);
  if (!c.tied_embeddings) {
    auto head = take("lm_head.weight", {c.vocab_size, c.dim});
    if (!head.ok()) return head.status();
    w.classifier = *std::move(head);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const LayerTensor& lt : kLayerTensors) {
      std::vector<int64_t> shape = LayerShape(c, lt.suffix);
      auto t = take(absl::StrCat("model.layers.", l, ".", lt.suffix), shape);
      if (!t.ok()) return t.status();
      std::vector<float> m = *std::move(t);
      if (lt.rotary_q) m = PermuteRotaryRows(m, c.n_heads, c.head_size(), c.dim, true);
      if (lt.rotary_k) m = PermuteRotaryRows(m, c.n_kv_heads, c.head_size(), c.dim, true);
      std::vector<float>& dst = w.*(lt.array);
      std::copy(m.begin(), m.end(), dst.begin() + l * Count(shape));
    }
  }
  return w;
}

absl::Status SaveHfModel(const ModelWeights& w, const std::string& dir) {
  if (absl::Status s = w.Validate(); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const ModelConfig& c = w.config;
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.dim},
      {"intermediate_size", c.hidden_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tied_embeddings},
      {"bos_token_id", c.bos_id},
      {"eos_token_id", c.eos_id},
      {"hidden_act", "silu"},
      {"torch_dtype", "float32"},
  };
  std::ofstream cout(dir + "/config.json", std::ios::trunc);
  cout << j.dump(2) << "\n";
  cout.close();
  if (!cout) return absl::InternalError(absl::StrCat("write failed: ", dir, "/config.json"));
  std::map<std::string, FloatTensor> t;
  t["model.embed_tokens.weight"] = {{c.vocab_size, c.dim}, w.token_embedding};
  t["model.norm.weight"] = {{c.dim}, w.rms_final};
  if (!c.tied_embeddings) t["lm_head.weight"] = {{c.vocab_size, c.dim}, w.classifier};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const LayerTensor& lt : kLayerTensors) {
      std::vector<int64_t> shape = LayerShape(c, lt.suffix);
      const std::vector<float>& src = w.*(lt.array);
      std::vector<float> m(src.begin() + l * Count(shape), src.begin() + (l + 1) * Count(shape));
      if (lt.rotary_q) m = PermuteRotaryRows(m, c.n_heads, c.head_size(), c.dim, false);
      if (lt.rotary_k) m = PermuteRotaryRows(m, c.n_kv_heads, c.head_size(), c.dim, false);
      t[absl::StrCat("model.layers.", l, ".", lt.suffix)] = {shape, std::move(m)};
    }
  }
  return WriteSafetensors(t, dir + "/model.safetensors");
}

}  // namespace raio::llm
