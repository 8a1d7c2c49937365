#include "raio/llm/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "raio/llm/sentencepiece_model.h"

namespace raio::llm {
namespace {

// "▁" (U+2581) as SentencePiece writes spaces.
constexpr std::string_view kSpaceMark = "\xe2\x96\x81";

// "<0xAB>" -> the byte 0xAB; -1 when `piece` is not a byte token.
int ByteTokenValue(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return -1;
  int v = 0;
  for (char ch : piece.substr(3, 2)) {
    v *= 16;
    if (ch >= '0' && ch <= '9')
      v += ch - '0';
    else if (ch >= 'A' && ch <= 'F')
      v += ch - 'A' + 10;
    else if (ch >= 'a' && ch <= 'f')
      v += ch - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string ReplaceSpaceMarks(std::string_view piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i).starts_with(kSpaceMark)) {
      out.push_back(' ');
      i += kSpaceMark.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<internal::SentencePieceModel> sp)
      : sp_(std::move(sp)) {
    for (const internal::SentencePieceToken& t : sp_->Vocabulary()) {
      int b = t.byte ? ByteTokenValue(t.piece) : -1;
      if (t.control) {
        bytes_.emplace_back();
      } else {
        bytes_.push_back(b >= 0 ? std::string(1, static_cast<char>(b))
                                : ReplaceSpaceMarks(t.piece));
      }
    }
  }
  std::vector<int> Encode(std::string_view text) const override {
    return text.empty() ? std::vector<int>() : sp_->Encode(text);
  }
  std::string TokenBytes(int id) const override {
    return id >= 0 && id < static_cast<int>(bytes_.size()) ? bytes_[id] : std::string();
  }
  int vocab_size() const override { return static_cast<int>(bytes_.size()); }

 private:
  std::unique_ptr<internal::SentencePieceModel> sp_;
  std::vector<std::string> bytes_;
};

}  // namespace

std::string Tokenizer::Decode(const std::vector<int>& ids, int prev_id) const {
  std::string out;
  for (int id : ids) {
    std::string b = TokenBytes(id);
    if ((prev_id < 0 || prev_id == bos_id()) && !b.empty() && b[0] == ' ') b.erase(0, 1);
    out += b;
    prev_id = id;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  std::string error;
  std::unique_ptr<internal::SentencePieceModel> sp =
      internal::SentencePieceModel::Load(path, &error);
  if (!sp) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", path, ": ", error));
  }
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  if (path.ends_with(".model")) return LoadSentencePieceTokenizer(path);
  return LoadLlama2cTokenizer(path);
}

absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return absl::InvalidArgumentError("messages must not be empty");
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      absl::StrAppend(&out, m.content, "\n\n");
    } else if (m.role == "user") {
      absl::StrAppend(&out, "User: ", m.content, "\n");
    } else if (m.role == "assistant") {
      absl::StrAppend(&out, "Assistant: ", m.content, "\n");
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown message role '", m.role, "'"));
    }
  }
  out += "Assistant:";
  return out;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t i = 0, last_complete = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) break;
    i += len;
    last_complete = i;
  }
  return last_complete;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 6) {
      len = 2, cp = c & 0x1f;
    } else if ((c >> 4) == 14) {
      len = 3, cp = c & 0x0f;
    } else if ((c >> 3) == 30) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace raio::llm
