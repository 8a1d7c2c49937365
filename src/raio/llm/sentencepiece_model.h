// A thin wrapper of Debian's SentencePieceProcessor. Its header declares its own
// `absl::string_view`, which clashes with Abseil's, so it is included only in
// sentencepiece_model.cc, and this header stays free of both.
// Thread-safety: const methods may be called from any thread at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace raio::llm::internal {

struct SentencePieceToken {
  std::string piece;
  bool control = false;  // BOS, EOS, or unknown
  bool byte = false;     // <0xAB> byte-fallback token
};

class SentencePieceModel {
 public:
  // nullptr, with `error` set, when `path` cannot be loaded.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();

  std::vector<int> Encode(std::string_view text) const;
  std::vector<SentencePieceToken> Vocabulary() const;

 private:
  SentencePieceModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace raio::llm::internal
