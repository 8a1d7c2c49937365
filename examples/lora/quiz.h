// Question/answer pairs from the quiz(6) data files of Debian's bsdgames package
// (/usr/share/games/bsdgames/quiz). Each line holds colon-separated categories; each
// category is a small pattern language: `a|b` alternatives, `{pat}` an optional part,
// `[a|b]` a group of alternatives inside a word, `\` quoting the next character, and a
// trailing `\` continuing the line (quiz(6), "Index and Data File Syntax"). For example
// `Cal{if{ornia}}|CA:Sacramento` or `Denmark:Copenhagen|K[o|o/|/o]benhavn`.
//
// Thread-safety: free functions over value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lora {

// quiz's capitals of Africa, the Americas, Asia, Europe and the US states: short answers,
// one line each, country (or state) in category 0, capital in category 1.
inline constexpr const char* kDefaultQuizDir = "/usr/share/games/bsdgames/quiz";
inline const std::vector<std::string>& DefaultQuizFiles() {
  static const std::vector<std::string> files = {"africa", "america", "asia", "europe", "state"};
  return files;
}

// One question/answer pair.
struct QuizPair {
  std::string question{};  // canonical form of the question category, e.g. "California"
  std::string answer{};    // canonical form of the answer category, e.g. "Sacramento"
  // Every form quiz would accept as the answer (the canonical one first), e.g.
  // {"Copenhagen", "Kobenhavn", ...}; at most kMaxForms.
  std::vector<std::string> accepted{};
  std::string source{};  // "file:line"
};

inline constexpr size_t kMaxForms = 64;

// What LoadQuizFile read.
struct QuizFile {
  std::vector<QuizPair> pairs;
  int skipped = 0;  // lines that did not parse, lacked a category or had unclean text
};

// The pattern's canonical form: the first "clean" alternative of each `a|b` (letters,
// digits, space, and - . , ' only; quiz writes accents as overstrikes, "'\be" for e
// acute), or the first one if none is clean, and every optional `{...}` part included:
// "Cal{if{ornia}}|CA" -> "California", "Yaound['\be|e\b'|e]" -> "Yaounde". Empty on a
// syntax error (an unbalanced bracket or brace, a trailing backslash).
std::string CanonicalForm(const std::string& pattern);

// Every text the pattern matches, at most `max_forms` (the enumeration stops there); empty
// on a syntax error.
std::vector<std::string> ExpandForms(const std::string& pattern, size_t max_forms = kMaxForms);

// Reads a quiz data file: category `question_field` as the question, `answer_field` as the
// answer. Lines that fail to parse, lack either category, have an empty one (quiz does not
// ask those), or whose canonical question or answer is not clean text are skipped and
// counted. Throws std::runtime_error naming the path when the file cannot be opened (the
// message says which package provides it).
QuizFile LoadQuizFile(const std::string& path, int question_field = 0, int answer_field = 1);

// Splits `pairs` into held-out (`held_out_fraction` of them, at least one when there are
// two or more pairs) and training pairs by a permutation seeded with `seed` (std::mt19937_64,
// Fisher-Yates: the same on every platform for a given seed).
void SplitPairs(std::vector<QuizPair> pairs, double held_out_fraction, uint64_t seed,
                std::vector<QuizPair>* train, std::vector<QuizPair>* held_out);

// The default prompt template: "{}" stands for the question.
inline constexpr const char* kDefaultPromptTemplate = "Q: What is the capital of {}? A:";

// The prompt the model sees, `prompt_template` with its first "{}" replaced by the question:
// "Q: What is the capital of Ohio? A:". The response it learns is the answer, "Columbus"
// (the tokenizer adds the word-boundary space before it).
std::string QuizPrompt(const std::string& prompt_template, const QuizPair& pair);

// The text generated after the prompt, up to the first newline, with surrounding spaces
// removed.
std::string TrimAnswer(const std::string& generated);

// Whether `answer` (trimmed) is one of the pair's accepted forms (exact, case-sensitive).
bool IsCorrect(const QuizPair& pair, const std::string& answer);

}  // namespace lora
