// Tokenizers of Llama-family models: SentencePiece models (`tokenizer.model`, through
// Debian's libsentencepiece) and llama2.c's `tokenizer.bin` format (scored pieces, BPE
// merges by score, byte fallback), behind one interface; and the chat template.
// Thread-safety: a loaded Tokenizer is immutable; its const methods may be called from
// any thread at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace raio::llm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text` (UTF-8), with the SentencePiece dummy-prefix space, without BOS.
  virtual std::vector<int> Encode(std::string_view text) const = 0;
  // The bytes token `id` stands for: "▁" becomes a space, byte tokens (<0x0A>) become
  // their byte, control tokens (BOS, EOS, unknown) become "". Out-of-range ids give "".
  virtual std::string TokenBytes(int id) const = 0;
  virtual int vocab_size() const = 0;

  int bos_id() const { return 1; }
  int eos_id() const { return 2; }

  // Text of `ids`. A leading space is dropped when the token before them is BOS or
  // absent (`prev_id` < 0), as llama2.c and SentencePiece do at the start of a text.
  // The result may end inside a UTF-8 sequence split over tokens.
  std::string Decode(const std::vector<int>& ids, int prev_id = -1) const;
};

// Loads a SentencePiece model file. NotFound / InvalidArgument with the library's reason.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);
// Loads a llama2.c tokenizer file (int32 max_token_length, then per token a float32
// score, an int32 length and the bytes). InvalidArgument on a truncated file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path);
// Either, by extension: `.model` is SentencePiece, anything else llama2.c's format.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// One chat message (OpenAI `messages[]` entry).
struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The chat template (documented in docs/design/llm.md): the system message, if any,
// then each message as "User: ...\n" / "Assistant: ...\n", ending with "Assistant:"
// for the model to continue. InvalidArgument on an unknown role or no messages.
absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages);

// Length of the longest prefix of `s` that is valid, complete UTF-8, so that a streamed
// text never ends inside a character.
size_t CompleteUtf8Prefix(std::string_view s);
// Whether `s` is valid UTF-8 throughout.
bool IsValidUtf8(std::string_view s);

}  // namespace raio::llm
