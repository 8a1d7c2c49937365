// llama2.c's tokenizer.bin: scored pieces; encoding is greedy BPE by score over UTF-8
// characters with byte fallback (id = byte + 3), after a dummy-prefix space.
#include <fstream>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "raio/llm/tokenizer.h"

namespace raio::llm {
namespace {

class Llama2cTokenizer : public Tokenizer {
 public:
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    for (size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int>(i));
  }

  std::vector<int> Encode(std::string_view text) const override {
    std::vector<int> ids;
    if (text.empty()) return ids;
    if (auto it = index_.find(" "); it != index_.end()) ids.push_back(it->second);
    for (size_t i = 0; i < text.size();) {
      size_t len = 1;
      unsigned char c = text[i];
      if (c >= 0xc0) {
        while (i + len < text.size() && (static_cast<unsigned char>(text[i + len]) >> 6) == 2 &&
               len < 4) {
          ++len;
        }
      }
      auto it = index_.find(std::string(text.substr(i, len)));
      if (it != index_.end()) {
        ids.push_back(it->second);
      } else {
        for (size_t k = 0; k < len; ++k) ids.push_back(static_cast<unsigned char>(text[i + k]) + 3);
      }
      i += len;
    }
    // Merge the adjacent pair whose concatenation scores best until none is a piece.
    for (;;) {
      float best = -1e30f;
      int best_id = -1;
      size_t best_at = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        auto it = index_.find(pieces_[ids[i]] + pieces_[ids[i + 1]]);
        if (it != index_.end() && scores_[it->second] > best) {
          best = scores_[it->second];
          best_id = it->second;
          best_at = i;
        }
      }
      if (best_id < 0) break;
      ids[best_at] = best_id;
      ids.erase(ids.begin() + best_at + 1);
    }
    return ids;
  }

  std::string TokenBytes(int id) const override {
    if (id < 0 || id >= static_cast<int>(pieces_.size()) || id == bos_id() || id == eos_id() ||
        id == 0) {
      return "";
    }
    const std::string& p = pieces_[id];
    if (p.size() == 6 && p.starts_with("<0x") && p[5] == '>') {
      return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
    }
    return p;
  }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer ", path));
  int32_t max_len = 0;
  if (!in.read(reinterpret_cast<char*>(&max_len), 4) || max_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad tokenizer header"));
  }
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (;;) {
    float score;
    int32_t len;
    if (!in.read(reinterpret_cast<char*>(&score), 4)) break;
    if (!in.read(reinterpret_cast<char*>(&len), 4) || len < 0 || len > max_len) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated at token ", pieces.size()));
    }
    std::string piece(len, '\0');
    if (!in.read(piece.data(), len)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated at token ", pieces.size()));
    }
    pieces.push_back(std::move(piece));
    scores.push_back(score);
  }
  if (pieces.size() < 3) return absl::InvalidArgumentError(absl::StrCat(path, ": no tokens"));
  return std::unique_ptr<Tokenizer>(new Llama2cTokenizer(std::move(pieces), std::move(scores)));
}

}  // namespace raio::llm
