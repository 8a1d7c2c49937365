#include "raio/common/labels.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace raio {

namespace {

// One selector value: negated or not, and the set of values it names.
struct Term {
  bool negated = false;
  std::vector<std::string> values;
};

absl::StatusOr<Term> ParseTerm(const std::string& key, absl::string_view text) {
  if (key.empty()) return absl::InvalidArgumentError("a label selector has an empty key");
  Term t;
  text = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&text, "!")) t.negated = true;
  if (absl::ConsumePrefix(&text, "in(")) {
    if (!absl::ConsumeSuffix(&text, ")")) {
      return absl::InvalidArgumentError(
          absl::StrCat("label selector ", key, ": \"in(\" without a closing \")\""));
    }
    for (absl::string_view v : absl::StrSplit(text, ',')) {
      t.values.emplace_back(absl::StripAsciiWhitespace(v));
    }
  } else {
    t.values.emplace_back(text);
  }
  return t;
}

}  // namespace

absl::Status ValidateLabelSelector(const std::map<std::string, std::string>& selector) {
  for (const auto& [key, value] : selector) {
    if (auto t = ParseTerm(key, value); !t.ok()) return t.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> MatchLabels(const std::map<std::string, std::string>& labels,
                                 const std::map<std::string, std::string>& selector) {
  for (const auto& [key, value] : selector) {
    auto term = ParseTerm(key, value);
    if (!term.ok()) return term.status();
    auto it = labels.find(key);
    bool in = it != labels.end() &&
              std::find(term->values.begin(), term->values.end(), it->second) != term->values.end();
    if (in == term->negated) return false;
  }
  return true;
}

}  // namespace raio
