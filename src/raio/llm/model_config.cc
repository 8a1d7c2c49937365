#include "raio/llm/model_config.h"

#include "absl/strings/str_cat.h"

namespace raio::llm {

absl::Status ModelConfig::Validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"dim", dim},
                                                   {"hidden_dim", hidden_dim},
                                                   {"n_layers", n_layers},
                                                   {"n_heads", n_heads},
                                                   {"n_kv_heads", n_kv_heads},
                                                   {"vocab_size", vocab_size},
                                                   {"max_seq_len", max_seq_len}};
  for (const auto& [name, v] : sizes) {
    if (v <= 0 || v > (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", name, " = ", v, " is out of range"));
    }
  }
  if (dim % n_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: dim ", dim, " is not a multiple of n_heads ", n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: n_heads ", n_heads, " is not a multiple of n_kv_heads ", n_kv_heads));
  }
  if (head_size() % 2 != 0) {
    return absl::InvalidArgumentError("model config: head size must be even for rotary");
  }
  if (!(norm_eps > 0) || !(rope_theta > 0)) {
    return absl::InvalidArgumentError("model config: norm_eps and rope_theta must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace raio::llm
