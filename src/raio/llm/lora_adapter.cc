#include "raio/llm/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace raio::llm {
namespace {

// The ModelWeights array a module adapts, its [out, in] shape, and the heads its rows are
// permuted with (0: none).
struct ModuleTarget {
  std::vector<float>* array;
  int64_t out, in, rotary_heads;
};

ModuleTarget Target(std::string_view module, ModelWeights* w) {
  const ModelConfig& c = w->config;
  if (module == "q_proj") return {&w->wq, c.dim, c.dim, c.n_heads};
  if (module == "k_proj") return {&w->wk, c.kv_dim(), c.dim, c.n_kv_heads};
  if (module == "v_proj") return {&w->wv, c.kv_dim(), c.dim, 0};
  if (module == "o_proj") return {&w->wo, c.dim, c.dim, 0};
  if (module == "gate_proj") return {&w->w1, c.hidden_dim, c.dim, 0};
  if (module == "up_proj") return {&w->w3, c.hidden_dim, c.dim, 0};
  return {&w->w2, c.dim, c.hidden_dim, 0};  // down_proj
}

bool IsLoraModule(std::string_view m) {
  return std::find(kLoraModules.begin(), kLoraModules.end(), m) != kLoraModules.end();
}

// Parses a PEFT tensor name into (layer, module, is A). InvalidArgument otherwise.
absl::Status ParseTensorName(const std::string& name, int64_t* layer, std::string* module,
                             bool* lora_a) {
  std::vector<std::string> p = absl::StrSplit(name, '.');
  // base_model . model . model . layers . {i} . {parent} . {module} . lora_X . weight
  if (p.size() != 9 || p[0] != "base_model" || p[1] != "model" || p[2] != "model" ||
      p[3] != "layers" || !absl::SimpleAtoi(p[4], layer) || *layer < 0 || !IsLoraModule(p[6]) ||
      p[5] != LoraModuleParent(p[6]) || (p[7] != "lora_A" && p[7] != "lora_B") ||
      p[8] != "weight") {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is not a LoRA A/B weight of a Llama layer module"));
  }
  *module = p[6];
  *lora_a = p[7] == "lora_A";
  return absl::OkStatus();
}

}  // namespace

absl::Status LoraConfig::Validate() const {
  if (r <= 0) return absl::InvalidArgumentError(absl::StrCat("lora: r must be > 0, got ", r));
  if (!(dropout >= 0 && dropout < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora: dropout must be in [0, 1), got ", dropout));
  }
  if (target_modules.empty()) return absl::InvalidArgumentError("lora: no target_modules");
  std::set<std::string> seen;
  for (const std::string& m : target_modules) {
    if (!IsLoraModule(m)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lora: unknown target module '", m,
                       "' (one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"));
    }
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat("lora: target module '", m, "' repeated"));
    }
  }
  return absl::OkStatus();
}

std::string_view LoraModuleParent(std::string_view module) {
  return module == "gate_proj" || module == "up_proj" || module == "down_proj" ? "mlp"
                                                                               : "self_attn";
}

std::string LoraTensorName(int64_t layer, std::string_view module, bool lora_a) {
  return absl::StrCat("base_model.model.model.layers.", layer, ".",
                      std::string(LoraModuleParent(module)), ".", std::string(module),
                      lora_a ? ".lora_A" : ".lora_B", ".weight");
}

absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir) {
  const std::string config_path = dir + "/adapter_config.json";
  std::ifstream in(config_path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", config_path));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(config_path + ": not a JSON object");
  LoraAdapter a;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", why));
  };
  try {
    if (j.value("peft_type", std::string()) != "LORA") return bad("peft_type is not LORA");
    if (j.value("bias", std::string("none")) != "none") return bad("bias must be \"none\"");
    if (j.value("fan_in_fan_out", false)) return bad("fan_in_fan_out is not supported");
    if (j.value("use_dora", false)) return bad("DoRA (use_dora) is not supported");
    a.config.r = j.at("r").get<int64_t>();
    a.config.alpha = j.value("lora_alpha", static_cast<double>(a.config.r));
    a.config.dropout = j.value("lora_dropout", 0.0);
    const nlohmann::json& tm = j.at("target_modules");
    if (!tm.is_array()) return bad("target_modules must be a list of module names");
    a.config.target_modules = tm.get<std::vector<std::string>>();
    std::sort(a.config.target_modules.begin(), a.config.target_modules.end());
    if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
      a.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
    }
    if (j.value("use_rslora", false)) {
      a.config.alpha *= std::sqrt(static_cast<double>(a.config.r));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  if (absl::Status s = a.config.Validate(); !s.ok()) return bad(s.message());
  const std::string st_path = dir + "/adapter_model.safetensors";
  absl::StatusOr<std::map<std::string, FloatTensor>> tensors = ReadSafetensors(st_path);
  if (!tensors.ok()) return tensors.status();
  for (const auto& [name, t] : *tensors) {
    int64_t layer;
    std::string module;
    bool lora_a;
    if (absl::Status s = ParseTensorName(name, &layer, &module, &lora_a); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(st_path, ": ", s.message()));
    }
    const std::string pair = LoraTensorName(layer, module, !lora_a);
    if (!tensors->contains(pair)) {
      return absl::InvalidArgumentError(
          absl::StrCat(st_path, ": '", name, "' without '", pair, "'"));
    }
    if (t.shape.size() != 2 || t.shape[lora_a ? 0 : 1] != a.config.r) {
      return absl::InvalidArgumentError(
          absl::StrCat(st_path, ": '", name, "' is not a rank-r matrix (r = ", a.config.r, ")"));
    }
  }
  a.tensors = *std::move(tensors);
  return a;
}

absl::Status SaveLoraAdapter(const LoraAdapter& a, const std::string& dir) {
  if (absl::Status s = a.config.Validate(); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", a.config.r},
      {"lora_alpha", a.config.alpha},
      {"lora_dropout", a.config.dropout},
      {"target_modules", a.config.target_modules},
      {"bias", "none"},
      {"base_model_name_or_path", a.base_model_name_or_path},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"modules_to_save", nullptr},
      {"use_rslora", false},
  };
  const std::string config_path = dir + "/adapter_config.json";
  std::ofstream out(config_path, std::ios::trunc);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", config_path));
  return WriteSafetensors(a.tensors, dir + "/adapter_model.safetensors");
}

absl::Status MergeLoraAdapter(const LoraAdapter& a, ModelWeights* w) {
  const ModelConfig& c = w->config;
  const int64_t r = a.config.r;
  // Check every pair before changing anything.
  struct Update {
    ModuleTarget target;
    int64_t layer;
    const FloatTensor *lora_a, *lora_b;
  };
  std::vector<Update> updates;
  for (const auto& [name, t] : a.tensors) {
    int64_t layer;
    std::string module;
    bool lora_a;
    if (absl::Status s = ParseTensorName(name, &layer, &module, &lora_a); !s.ok()) return s;
    if (!lora_a) continue;
    auto b = a.tensors.find(LoraTensorName(layer, module, false));
    if (b == a.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("lora: '", name, "' has no lora_B"));
    }
    if (layer >= c.n_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("lora: '", name, "' is for layer ", layer, "; the model has ", c.n_layers));
    }
    ModuleTarget target = Target(module, w);
    if (t.shape != std::vector<int64_t>{r, target.in} ||
        b->second.shape != std::vector<int64_t>{target.out, r}) {
      return absl::InvalidArgumentError(
          absl::StrCat("lora: '", name, "' and its lora_B do not fit the model's ", module, " [",
                       target.out, ", ", target.in, "] at rank ", r));
    }
    updates.push_back({target, layer, &t, &b->second});
  }
  const float scaling = static_cast<float>(a.config.scaling());
  for (const Update& u : updates) {
    const int64_t out = u.target.out, in = u.target.in;
    std::vector<float> b = u.lora_b->data;
    if (u.target.rotary_heads > 0) {
      b = PermuteRotaryRows(b, u.target.rotary_heads, c.head_size(), r, /*inverse=*/true);
    }
    const float* am = u.lora_a->data.data();
    float* wm = u.target.array->data() + u.layer * out * in;
    for (int64_t o = 0; o < out; ++o) {
      float* row = wm + o * in;
      for (int64_t k = 0; k < r; ++k) {
        const float s = scaling * b[o * r + k];
        const float* arow = am + k * in;
        for (int64_t i = 0; i < in; ++i) row[i] += s * arow[i];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace raio::llm
