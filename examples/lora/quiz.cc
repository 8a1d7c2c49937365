#include "quiz.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>

namespace lora {
namespace {

// A parsed pattern: alternatives of sequences of literal runs and nested groups.
struct Alternatives;
struct Item {
  std::string literal;                  // when group is null
  std::shared_ptr<Alternatives> group;  // `{...}` or `[...]`
  bool optional = false;                // `{...}`
};
using Sequence = std::vector<Item>;
struct Alternatives {
  std::vector<Sequence> alternatives;
};

bool IsClean(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ' ||
           c == '-' || c == '.' || c == ',' || c == '\'';
  });
}

// Parses alternatives from `pos` up to `close` (or the end when close is 0); nullopt on a
// syntax error. Leaves `pos` after the closing character.
std::optional<Alternatives> Parse(const std::string& p, size_t& pos, char close) {
  Alternatives alts;
  alts.alternatives.emplace_back();
  while (pos < p.size()) {
    const char c = p[pos++];
    Sequence& seq = alts.alternatives.back();
    if (c == close) return alts;
    if (c == '|') {
      alts.alternatives.emplace_back();
    } else if (c == '{' || c == '[') {
      auto inner = Parse(p, pos, c == '{' ? '}' : ']');
      if (!inner) return std::nullopt;
      seq.push_back({"", std::make_shared<Alternatives>(*std::move(inner)), c == '{'});
    } else if (c == '}' || c == ']') {
      return std::nullopt;  // closes nothing open
    } else {
      char ch = c;
      if (c == '\\') {
        if (pos == p.size()) return std::nullopt;
        ch = p[pos++];
      }
      if (seq.empty() || seq.back().group) seq.push_back({});
      seq.back().literal += ch;
    }
  }
  if (close != 0) return std::nullopt;  // unclosed
  return alts;
}

std::string Canonical(const Alternatives& alts);

std::string Canonical(const Sequence& seq) {
  std::string out;
  for (const Item& item : seq) out += item.group ? Canonical(*item.group) : item.literal;
  return out;
}

std::string Canonical(const Alternatives& alts) {
  for (const Sequence& seq : alts.alternatives) {
    std::string s = Canonical(seq);
    if (IsClean(s)) return s;
  }
  return Canonical(alts.alternatives.front());
}

void Expand(const Alternatives& alts, size_t max_forms, std::vector<std::string>* out);

void Expand(const Sequence& seq, size_t max_forms, std::vector<std::string>* out) {
  std::vector<std::string> forms = {""};
  for (const Item& item : seq) {
    std::vector<std::string> parts;
    if (item.group) {
      if (item.optional) parts.push_back("");
      Expand(*item.group, max_forms, &parts);
    } else {
      parts.push_back(item.literal);
    }
    std::vector<std::string> next;
    for (const std::string& f : forms) {
      for (const std::string& part : parts) {
        if (next.size() == max_forms) break;
        next.push_back(f + part);
      }
    }
    forms = std::move(next);
  }
  for (std::string& f : forms) {
    if (out->size() == max_forms) return;
    if (std::find(out->begin(), out->end(), f) == out->end()) out->push_back(std::move(f));
  }
}

void Expand(const Alternatives& alts, size_t max_forms, std::vector<std::string>* out) {
  for (const Sequence& seq : alts.alternatives) Expand(seq, max_forms, out);
}

std::optional<Alternatives> ParseAll(const std::string& pattern) {
  size_t pos = 0;
  return Parse(pattern, pos, 0);
}

// Splits a line at colons that are not quoted by a backslash (the backslashes stay, for
// the pattern parser).
std::vector<std::string> SplitCategories(const std::string& line) {
  std::vector<std::string> fields(1);
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      fields.back() += line.substr(i, 2);
      ++i;
    } else if (line[i] == ':') {
      fields.emplace_back();
    } else {
      fields.back() += line[i];
    }
  }
  return fields;
}

bool EndsWithContinuation(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[line.size() - 1 - n] == '\\') ++n;
  return n % 2 == 1;
}

}  // namespace

std::string CanonicalForm(const std::string& pattern) {
  auto alts = ParseAll(pattern);
  return alts ? Canonical(*alts) : "";
}

std::vector<std::string> ExpandForms(const std::string& pattern, size_t max_forms) {
  std::vector<std::string> forms;
  auto alts = ParseAll(pattern);
  if (alts) Expand(*alts, max_forms, &forms);
  return forms;
}

QuizFile LoadQuizFile(const std::string& path, int question_field, int answer_field) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open quiz file " + path +
                             " (Debian's bsdgames package provides the quiz files: "
                             "apt-get install bsdgames, or run scripts/install-deps.sh)");
  }
  QuizFile file;
  std::string line, physical;
  int line_no = 0, first_line = 0;
  while (std::getline(in, physical)) {
    ++line_no;
    if (line.empty()) first_line = line_no;
    if (!physical.empty() && physical.back() == '\r') physical.pop_back();
    if (EndsWithContinuation(physical)) {
      line += physical.substr(0, physical.size() - 1);
      continue;
    }
    line += physical;
    const std::vector<std::string> fields = SplitCategories(line);
    line.clear();
    if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
    const int need = std::max(question_field, answer_field);
    if (static_cast<int>(fields.size()) <= need) {
      ++file.skipped;
      continue;
    }
    QuizPair pair;
    pair.question = CanonicalForm(fields[question_field]);
    pair.answer = CanonicalForm(fields[answer_field]);
    pair.accepted = ExpandForms(fields[answer_field]);
    pair.source = path + ":" + std::to_string(first_line);
    if (pair.question.empty() || pair.answer.empty() || !IsClean(pair.question) ||
        !IsClean(pair.answer)) {
      ++file.skipped;
      continue;
    }
    // The canonical form is among the accepted ones; put it first.
    auto it = std::find(pair.accepted.begin(), pair.accepted.end(), pair.answer);
    if (it != pair.accepted.end()) pair.accepted.erase(it);
    pair.accepted.insert(pair.accepted.begin(), pair.answer);
    file.pairs.push_back(std::move(pair));
  }
  if (!line.empty()) ++file.skipped;  // a continuation at the end of the file
  return file;
}

void SplitPairs(std::vector<QuizPair> pairs, double held_out_fraction, uint64_t seed,
                std::vector<QuizPair>* train, std::vector<QuizPair>* held_out) {
  std::mt19937_64 rng(seed);
  // Fisher-Yates with our own index draw: std::shuffle's use of the engine is
  // implementation-defined, this is not.
  for (size_t i = pairs.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(pairs[i - 1], pairs[j]);
  }
  size_t n_held = static_cast<size_t>(held_out_fraction * static_cast<double>(pairs.size()));
  if (n_held == 0 && pairs.size() >= 2 && held_out_fraction > 0) n_held = 1;
  held_out->assign(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(n_held));
  train->assign(pairs.begin() + static_cast<std::ptrdiff_t>(n_held), pairs.end());
}

std::string QuizPrompt(const std::string& prompt_template, const QuizPair& pair) {
  std::string prompt = prompt_template;
  const size_t at = prompt.find("{}");
  if (at != std::string::npos) prompt.replace(at, 2, pair.question);
  return prompt;
}

std::string TrimAnswer(const std::string& generated) {
  std::string s = generated.substr(0, generated.find('\n'));
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool IsCorrect(const QuizPair& pair, const std::string& answer) {
  const std::string a = TrimAnswer(answer);
  return std::find(pair.accepted.begin(), pair.accepted.end(), a) != pair.accepted.end();
}

}  // namespace lora
