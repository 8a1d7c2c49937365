#include "raio/train/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace raio::train {
namespace {

// A copy of `count` floats of `v` from `offset`, as a tensor of `shape`.
torch::Tensor FromHost(const std::vector<float>& v, int64_t offset, at::IntArrayRef shape) {
  return torch::from_blob(const_cast<float*>(v.data()) + offset, shape, torch::kFloat).clone();
}

void ToHost(const torch::Tensor& t, std::vector<float>* v, int64_t offset) {
  torch::Tensor c = t.detach().to(torch::kFloat).contiguous();
  std::memcpy(v->data() + offset, c.data_ptr<float>(), c.numel() * sizeof(float));
}

std::vector<float> ToVector(const torch::Tensor& t) {
  std::vector<float> v(t.numel());
  ToHost(t, &v, 0);
  return v;
}

// 1234567 -> "1,234,567" (PEFT prints counts with thousands separators).
std::string WithCommas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string TorchError(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

// The ModelWeights array of a module, and the heads its rows are rotary-permuted with
// between Meta's order (here) and HF's (PEFT files); 0: not permuted.
struct ModuleArray {
  std::vector<float> llm::ModelWeights::*array;
  int64_t out, in, rotary_heads;
};

ModuleArray ArrayOf(std::string_view module, const llm::ModelConfig& c) {
  using W = llm::ModelWeights;
  if (module == "q_proj") return {&W::wq, c.dim, c.dim, c.n_heads};
  if (module == "k_proj") return {&W::wk, c.kv_dim(), c.dim, c.n_kv_heads};
  if (module == "v_proj") return {&W::wv, c.kv_dim(), c.dim, 0};
  if (module == "o_proj") return {&W::wo, c.dim, c.dim, 0};
  if (module == "gate_proj") return {&W::w1, c.hidden_dim, c.dim, 0};
  if (module == "up_proj") return {&W::w3, c.hidden_dim, c.dim, 0};
  return {&W::w2, c.dim, c.hidden_dim, 0};  // down_proj
}

}  // namespace

LoraLinearImpl::LoraLinearImpl(const torch::Tensor& w) {
  weight = register_parameter("weight", w.clone());
}

void LoraLinearImpl::AddLora(const LoraConfig& config) {
  weight.requires_grad_(false);
  const int64_t out = weight.size(0), in = weight.size(1);
  lora_A = register_parameter("lora_A", torch::empty({config.r, in}));
  lora_B = register_parameter("lora_B", torch::zeros({out, config.r}));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(lora_A, std::sqrt(5.0));
  }
  scaling = config.scaling();
  dropout = register_module("lora_dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::matmul(x, weight.t());
  if (!lora_A.defined()) return y;
  torch::Tensor u = torch::matmul(torch::matmul(dropout(x), lora_A.t()), lora_B.t());
  return y + u * scaling;
}

torch::Tensor LoraLinearImpl::MergedWeight() const {
  torch::NoGradGuard no_grad;
  if (!lora_A.defined()) return weight.detach().clone();
  return weight + torch::matmul(lora_B, lora_A) * scaling;
}

struct TrainableLlama::Layer : torch::nn::Module {
  Layer(const llm::ModelWeights& w, int64_t l) {
    const llm::ModelConfig& c = w.config;
    for (std::string_view name : llm::kLoraModules) {
      ModuleArray a = ArrayOf(name, c);
      *Get(name) = register_module(
          std::string(name), LoraLinear(FromHost(w.*a.array, l * a.out * a.in, {a.out, a.in})));
    }
    input_layernorm =
        register_parameter("input_layernorm", FromHost(w.rms_att, l * c.dim, {c.dim}));
    post_attention_layernorm =
        register_parameter("post_attention_layernorm", FromHost(w.rms_ffn, l * c.dim, {c.dim}));
  }
  LoraLinear* Get(std::string_view name) {
    if (name == "q_proj") return &q_proj;
    if (name == "k_proj") return &k_proj;
    if (name == "v_proj") return &v_proj;
    if (name == "o_proj") return &o_proj;
    if (name == "gate_proj") return &gate_proj;
    if (name == "up_proj") return &up_proj;
    return &down_proj;
  }
  LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr}, gate_proj{nullptr},
      up_proj{nullptr}, down_proj{nullptr};
  torch::Tensor input_layernorm, post_attention_layernorm;  // [dim]
};

std::string ParameterCounts::ToString() const {
  return absl::StrFormat("trainable params: %s || all params: %s || trainable%%: %.4f",
                         WithCommas(trainable), WithCommas(total), trainable_percent());
}

TrainableLlama::TrainableLlama(const llm::ModelConfig& config, const TrainableLlamaOptions& options)
    : config_(config), options_(options) {}

absl::StatusOr<std::shared_ptr<TrainableLlama>> TrainableLlama::Create(
    const llm::ModelWeights& w, const TrainableLlamaOptions& options) {
  if (absl::Status s = w.Validate(); !s.ok()) return s;
  if (options.lora.has_value()) {
    if (absl::Status s = options.lora->Validate(); !s.ok()) return s;
  }
  const llm::ModelConfig& c = w.config;
  std::shared_ptr<TrainableLlama> m(new TrainableLlama(c, options));
  m->embed_tokens_ =
      m->register_parameter("embed_tokens", FromHost(w.token_embedding, 0, {c.vocab_size, c.dim}));
  m->lm_head_ =
      c.tied_embeddings
          ? m->embed_tokens_
          : m->register_parameter("lm_head", FromHost(w.classifier, 0, {c.vocab_size, c.dim}));
  m->norm_ = m->register_parameter("norm", FromHost(w.rms_final, 0, {c.dim}));
  auto list = m->register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto layer = std::make_shared<Layer>(w, l);
    list->push_back(layer);
    m->layers_.push_back(layer);
  }
  // Rotary tables in float32 arithmetic, as llama2.c and raio::llm's model compute them.
  const int64_t hs = c.head_size(), half = hs / 2;
  std::vector<float> cos(c.max_seq_len * half), sin(c.max_seq_len * half);
  for (int64_t pos = 0; pos < c.max_seq_len; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const float freq = 1.0f / std::pow(static_cast<float>(c.rope_theta),
                                         static_cast<float>(2 * i) / static_cast<float>(hs));
      const float val = static_cast<float>(pos) * freq;
      cos[pos * half + i] = std::cos(val);
      sin[pos * half + i] = std::sin(val);
    }
  }
  m->cos_ = m->register_buffer("rope_cos", FromHost(cos, 0, {c.max_seq_len, half}));
  m->sin_ = m->register_buffer("rope_sin", FromHost(sin, 0, {c.max_seq_len, half}));
  if (options.lora.has_value()) {
    for (torch::Tensor& p : m->parameters()) p.requires_grad_(false);
    for (auto& layer : m->layers_) {
      for (const std::string& name : options.lora->target_modules) {
        (*layer->Get(name))->AddLora(*options.lora);
      }
    }
  }
  return m;
}

absl::StatusOr<torch::Tensor> TrainableLlama::Forward(const torch::Tensor& input_ids,
                                                      const torch::Tensor& attention_mask) {
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.scalar_type() != torch::kLong) {
    return absl::InvalidArgumentError("forward: input_ids must be an int64 tensor [B, T]");
  }
  if (!attention_mask.defined() || attention_mask.sizes() != input_ids.sizes()) {
    return absl::InvalidArgumentError("forward: attention_mask must have input_ids' shape [B, T]");
  }
  if (input_ids.size(1) > config_.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("forward: ", input_ids.size(1),
                                                   " positions past the context length ",
                                                   config_.max_seq_len));
  }
  if (input_ids.numel() > 0 && (input_ids.min().item<int64_t>() < 0 ||
                                input_ids.max().item<int64_t>() >= config_.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("forward: a token id is outside [0, ", config_.vocab_size, ")"));
  }
  try {
    return ForwardImpl(input_ids, attention_mask);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward: ", TorchError(e)));
  }
}

absl::StatusOr<torch::Tensor> TrainableLlama::ForwardImpl(const torch::Tensor& input_ids,
                                                          const torch::Tensor& attention_mask) {
  const llm::ModelConfig& c = config_;
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const int64_t H = c.n_heads, KVH = c.n_kv_heads, G = H / KVH, hs = c.head_size();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto rms_norm = [&](const torch::Tensor& x, const torch::Tensor& w) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + c.norm_eps) * w;
  };
  torch::Tensor cos = cos_.narrow(0, 0, T).view({1, T, 1, hs / 2});
  torch::Tensor sin = sin_.narrow(0, 0, T).view({1, T, 1, hs / 2});
  // Rotates pairs (2i, 2i + 1) of each head (Meta's layout): x [B, T, heads, hs].
  auto rope = [&](const torch::Tensor& x) {
    torch::Tensor p = x.reshape({B, T, x.size(2), hs / 2, 2});
    torch::Tensor x0 = p.select(-1, 0), x1 = p.select(-1, 1);
    return torch::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).reshape(x.sizes());
  };
  // Key j is visible to query t when j <= t and j is a real token. A large negative bias,
  // not -inf, so that a row of padding only (no visible key) stays finite.
  torch::Tensor causal = torch::ones({T, T}, torch::kBool).tril();
  torch::Tensor visible = causal.view({1, 1, T, T}) & (attention_mask != 0).view({B, 1, 1, T});
  torch::Tensor bias = torch::zeros({B, 1, T, T}).masked_fill(visible.logical_not(), -1e9);

  torch::Tensor x = embed_tokens_.index_select(0, input_ids.reshape({-1})).view({B, T, c.dim});
  for (auto& layer : layers_) {
    torch::Tensor h = rms_norm(x, layer->input_layernorm);
    torch::Tensor q = rope(layer->q_proj(h).view({B, T, H, hs}));
    torch::Tensor k = rope(layer->k_proj(h).view({B, T, KVH, hs}));
    torch::Tensor v = layer->v_proj(h).view({B, T, KVH, hs});
    if (G > 1) {  // query head h reads key/value head h / G
      k = k.repeat_interleave(G, 2);
      v = v.repeat_interleave(G, 2);
    }
    q = q.transpose(1, 2);  // [B, H, T, hs]
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale + bias;  // [B, H, T, T]
    torch::Tensor attn =
        torch::matmul(scores.softmax(-1), v).transpose(1, 2).reshape({B, T, c.dim});
    x = x + layer->o_proj(attn);
    h = rms_norm(x, layer->post_attention_layernorm);
    x = x + layer->down_proj(torch::silu(layer->gate_proj(h)) * layer->up_proj(h));
  }
  return torch::matmul(rms_norm(x, norm_), lm_head_.t());
}

ParameterCounts TrainableLlama::CountParameters() const {
  ParameterCounts counts;
  for (const torch::Tensor& p : parameters()) {
    counts.total += p.numel();
    if (p.requires_grad()) counts.trainable += p.numel();
  }
  return counts;
}

absl::StatusOr<llm::LoraAdapter> TrainableLlama::ExportLoraAdapter(
    const std::string& base_model) const {
  if (!options_.lora.has_value()) {
    return absl::FailedPreconditionError("the model has no LoRA adapters (full fine-tuning)");
  }
  llm::LoraAdapter a;
  a.config = *options_.lora;
  a.base_model_name_or_path = base_model;
  const int64_t r = a.config.r;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (const std::string& name : a.config.target_modules) {
      const LoraLinearImpl& m = **layers_[l]->Get(name);
      const ModuleArray arr = ArrayOf(name, config_);
      std::vector<float> b = ToVector(m.lora_B);
      if (arr.rotary_heads > 0) {
        b = llm::PermuteRotaryRows(b, arr.rotary_heads, config_.head_size(), r, /*inverse=*/false);
      }
      a.tensors[llm::LoraTensorName(l, name, true)] = {{r, arr.in}, ToVector(m.lora_A)};
      a.tensors[llm::LoraTensorName(l, name, false)] = {{arr.out, r}, std::move(b)};
    }
  }
  return a;
}

absl::Status TrainableLlama::LoadLoraAdapter(const llm::LoraAdapter& a) {
  if (!options_.lora.has_value()) {
    return absl::FailedPreconditionError("the model has no LoRA adapters (full fine-tuning)");
  }
  LoraConfig& mine = *options_.lora;
  std::set<std::string> want(mine.target_modules.begin(), mine.target_modules.end());
  std::set<std::string> got(a.config.target_modules.begin(), a.config.target_modules.end());
  if (a.config.r != mine.r || want != got) {
    return absl::InvalidArgumentError(absl::StrCat("adapter: r ", a.config.r, " and ", got.size(),
                                                   " target modules differ from the model's r ",
                                                   mine.r, " and ", want.size(), " modules"));
  }
  const int64_t r = mine.r;
  // Check every tensor before copying any.
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (const std::string& name : mine.target_modules) {
      const ModuleArray arr = ArrayOf(name, config_);
      for (bool is_a : {true, false}) {
        const std::string key = llm::LoraTensorName(l, name, is_a);
        auto it = a.tensors.find(key);
        const std::vector<int64_t> shape =
            is_a ? std::vector<int64_t>{r, arr.in} : std::vector<int64_t>{arr.out, r};
        if (it == a.tensors.end() || it->second.shape != shape) {
          return absl::InvalidArgumentError(absl::StrCat(
              "adapter: '", key, "' is missing or not of shape [", shape[0], ", ", shape[1], "]"));
        }
      }
    }
  }
  torch::NoGradGuard no_grad;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    for (const std::string& name : mine.target_modules) {
      LoraLinearImpl& m = **layers_[l]->Get(name);
      const ModuleArray arr = ArrayOf(name, config_);
      std::vector<float> b = a.tensors.at(llm::LoraTensorName(l, name, false)).data;
      if (arr.rotary_heads > 0) {
        b = llm::PermuteRotaryRows(b, arr.rotary_heads, config_.head_size(), r, /*inverse=*/true);
      }
      m.lora_A.copy_(
          FromHost(a.tensors.at(llm::LoraTensorName(l, name, true)).data, 0, {r, arr.in}));
      m.lora_B.copy_(FromHost(b, 0, {arr.out, r}));
      m.scaling = a.config.scaling();
    }
  }
  mine.alpha = a.config.alpha;
  return absl::OkStatus();
}

llm::ModelWeights TrainableLlama::ExportWeights() const {
  llm::ModelWeights w;
  w.config = config_;
  w.Allocate();
  const llm::ModelConfig& c = config_;
  ToHost(embed_tokens_, &w.token_embedding, 0);
  if (!c.tied_embeddings) ToHost(lm_head_, &w.classifier, 0);
  ToHost(norm_, &w.rms_final, 0);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Layer& layer = *layers_[l];
    ToHost(layer.input_layernorm, &w.rms_att, l * c.dim);
    ToHost(layer.post_attention_layernorm, &w.rms_ffn, l * c.dim);
    for (std::string_view name : llm::kLoraModules) {
      const ModuleArray arr = ArrayOf(name, c);
      ToHost((*layer.Get(name))->MergedWeight(), &(w.*arr.array), l * arr.out * arr.in);
    }
  }
  return w;
}

torch::Tensor CausalLmLoss(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t V = logits.size(-1), T = logits.size(1);
  torch::Tensor shifted_logits = logits.narrow(1, 0, T - 1).reshape({-1, V});
  torch::Tensor shifted_labels = labels.narrow(1, 1, T - 1).reshape({-1});
  return torch::nn::functional::cross_entropy(
      shifted_logits, shifted_labels,
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex));
}

}  // namespace raio::train
