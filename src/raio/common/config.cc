#include "raio/common/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/mutex.h"

extern char** environ;

namespace raio::config {

namespace internal {
#define RAIO_CONFIG_DEFINE_VALUE(type, name, def, unit, bounds, doc) \
  std::atomic<Repr<Type::type>::T> name##_value{Repr<Type::type>::T(def)};
RAIO_CONFIG_TABLE(RAIO_CONFIG_DEFINE_VALUE)
#undef RAIO_CONFIG_DEFINE_VALUE
}  // namespace internal

namespace {

using internal::Repr;

// Debian's abseil has its own string_view type.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view S(absl::string_view s) { return std::string_view(s.data(), s.size()); }

constexpr const char* kLogLevelNames[] = {"trace", "debug",    "info", "warn",
                                          "error", "critical", "off"};

// Durations longer than a year are surely a mistake (and would overflow deadlines).
constexpr int64_t kMaxDurationSeconds = 365LL * 24 * 3600;

std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest exact form
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(v);
}

// What Parse gives for an entry of type `t`: its stored type, except for a path, which
// is kept as text until it is stored (InternPath).
template <Type t>
using Parsed = std::conditional_t<t == Type::kPath, std::string, typename Repr<t>::T>;

// A path entry's value: a string that is never freed, so that a pointer a reader loaded
// stays valid whatever is written later. Each distinct value is kept once. Called only
// with WriteMu() held (when a value is stored).
const char* InternPath(const std::string& path) {
  static auto* paths = new std::set<std::string>();
  return paths->insert(path).first->c_str();
}

// What is stored for a parsed value.
template <Type t>
typename Repr<t>::T Stored(const Parsed<t>& v) {
  if constexpr (t == Type::kPath) {
    return InternPath(v);
  } else {
    return v;
  }
}

template <Type t>
std::string Format(typename Repr<t>::T v) {
  if constexpr (t == Type::kPath) {
    return std::string(v);
  } else if constexpr (t == Type::kDouble) {
    return FormatDouble(v);
  } else if constexpr (t == Type::kBool) {
    return v ? "true" : "false";
  } else if constexpr (t == Type::kMilliseconds || t == Type::kMicroseconds) {
    return absl::StrCat(v.count());
  } else if constexpr (t == Type::kLogLevel) {
    if (v == LogLevel::kAuto) return "auto";
    return std::string(kLogLevelNames[static_cast<int>(v)]);
  } else {
    return absl::StrCat(v);
  }
}

// What a value of type `t` must look like, for error messages.
std::string Want(Type t) {
  switch (t) {
    case Type::kInt:
      return "a whole number";
    case Type::kDouble:
      return "a finite number";
    case Type::kBool:
      return "true or false";
    case Type::kBytes:
      return "a byte count (a whole number, optionally with KiB, MiB, GiB or TiB)";
    case Type::kMilliseconds:
      return "a whole number of milliseconds";
    case Type::kMicroseconds:
      return "a whole number of microseconds";
    case Type::kLogLevel:
      return absl::StrCat("one of auto, ", absl::StrJoin(kLogLevelNames, ", "));
    case Type::kPath:
      return "an absolute path (or empty: none)";
  }
  return "a value";
}

std::string DescribeBounds(const Bounds& b) {
  const bool has_min = std::isfinite(b.min), has_max = std::isfinite(b.max);
  if (has_min && has_max) {
    if (b.min_exclusive) {
      return absl::StrCat("in (", FormatDouble(b.min), ", ", FormatDouble(b.max), "]");
    }
    return absl::StrCat("between ", FormatDouble(b.min), " and ", FormatDouble(b.max));
  }
  if (has_min) return absl::StrCat(b.min_exclusive ? "> " : ">= ", FormatDouble(b.min));
  if (has_max) return absl::StrCat("<= ", FormatDouble(b.max));
  return "";
}

bool InBounds(double v, const Bounds& b) {
  if (b.min_exclusive ? !(v > b.min) : !(v >= b.min)) return false;
  return v <= b.max;
}

// "4MiB" -> 4194304; nullopt when malformed or above 2^64 - 1.
std::optional<uint64_t> ParseBytes(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(A(text.substr(0, digits)), &n)) return std::nullopt;
  std::string suffix = absl::AsciiStrToLower(absl::StripAsciiWhitespace(A(text.substr(digits))));
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "kib") {
    shift = 10;
  } else if (suffix == "mib") {
    shift = 20;
  } else if (suffix == "gib") {
    shift = 30;
  } else if (suffix == "tib") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (shift > 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return n << shift;
}

// Parses `text` as a value of type `t` within `bounds`; the error names `label` (the
// entry's name, or its environment variable).
template <Type t>
absl::StatusOr<Parsed<t>> Parse(std::string_view label, std::string_view raw,
                                const Bounds& bounds) {
  using T = Parsed<t>;
  const std::string_view text = S(absl::StripAsciiWhitespace(A(raw)));
  auto bad = [&](const std::string& want) {
    return absl::InvalidArgumentError(absl::StrCat(A(label), "='", A(raw), "' is not ", want));
  };
  std::optional<T> value;
  double numeric = 0;  // for the bounds check
  if constexpr (t == Type::kInt) {
    int v = 0;
    if (absl::SimpleAtoi(A(text), &v)) {
      value = v;
      numeric = v;
    }
  } else if constexpr (t == Type::kDouble) {
    double v = 0;
    if (absl::SimpleAtod(A(text), &v) && std::isfinite(v)) {
      value = v;
      numeric = v;
    }
  } else if constexpr (t == Type::kBool) {
    bool v = false;
    if (absl::SimpleAtob(A(text), &v)) value = v;
  } else if constexpr (t == Type::kBytes) {
    if (auto v = ParseBytes(text)) {
      value = *v;
      numeric = static_cast<double>(*v);
    }
  } else if constexpr (t == Type::kMilliseconds || t == Type::kMicroseconds) {
    int64_t v = 0;
    const int64_t max =
        std::chrono::duration_cast<T>(std::chrono::seconds(kMaxDurationSeconds)).count();
    if (absl::SimpleAtoi(A(text), &v) && v <= max && v >= -max) {
      value = T(v);
      numeric = static_cast<double>(v);
    }
  } else if constexpr (t == Type::kLogLevel) {
    const std::string lower = absl::AsciiStrToLower(A(text));
    if (lower == "auto") value = LogLevel::kAuto;
    for (std::size_t i = 0; i < std::size(kLogLevelNames); ++i) {
      if (lower == kLogLevelNames[i]) value = static_cast<LogLevel>(i);
    }
  } else if constexpr (t == Type::kPath) {
    if (text.empty() || (text.front() == '/' && text.find('\0') == std::string_view::npos)) {
      value = std::string(text);
    }
  }
  const std::string range = DescribeBounds(bounds);
  std::string want = range.empty() ? Want(t) : absl::StrCat(Want(t), " ", range);
  if constexpr (t == Type::kMilliseconds || t == Type::kMicroseconds) want += " (at most a year)";
  if (!value) return bad(want);
  if constexpr (t != Type::kBool && t != Type::kLogLevel && t != Type::kPath) {
    if (!InBounds(numeric, bounds)) return bad(want);
  }
  return *value;
}

struct Entry {
  std::string_view name;
  Type type;
  std::string_view unit;
  std::string_view doc;
  // Parses and checks `text` (errors name `label`); stores it when `commit`.
  absl::Status (*apply)(std::string_view label, std::string_view text, bool commit);
  std::string (*current)();
  std::string (*default_value)();
  void (*reset)();
};

#define RAIO_CONFIG_ENTRY(type, name, def, unit, bounds, doc)                                      \
  Entry{#name,                                                                                     \
        Type::type,                                                                                \
        unit,                                                                                      \
        doc,                                                                                       \
        [](std::string_view label, std::string_view text, bool commit) -> absl::Status {           \
          auto v = Parse<Type::type>(label, text, bounds);                                         \
          if (!v.ok()) return v.status();                                                          \
          if (commit) {                                                                            \
            internal::name##_value.store(Stored<Type::type>(*v), std::memory_order_relaxed);       \
          }                                                                                        \
          return absl::OkStatus();                                                                 \
        },                                                                                         \
        [] { return Format<Type::type>(internal::name##_value.load(std::memory_order_relaxed)); }, \
        [] { return Format<Type::type>(kDefaults.name); },                                         \
        [] { internal::name##_value.store(kDefaults.name, std::memory_order_relaxed); }},

const Entry kEntries[] = {RAIO_CONFIG_TABLE(RAIO_CONFIG_ENTRY)};
#undef RAIO_CONFIG_ENTRY

const Entry* Find(std::string_view name) {
  for (const Entry& e : kEntries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// Levenshtein distance, for suggestions.
std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownName(std::string_view name) {
  std::string message = absl::StrCat("unknown name '", A(name), "'");
  // RAIO_LEASE_IDLE_TIMEOUT_MS or a near miss such as lease_idle_timeout.
  std::string lower = absl::AsciiStrToLower(A(name));
  if (lower.starts_with("raio_")) lower = lower.substr(5);
  const Entry* best = nullptr;
  std::size_t best_distance = 4;  // suggest only near misses
  for (const Entry& e : kEntries) {
    std::size_t d = EditDistance(lower, e.name);
    if (d < best_distance) {
      best = &e;
      best_distance = d;
    }
  }
  if (best != nullptr) absl::StrAppend(&message, " (did you mean '", A(best->name), "'?)");
  return message;
}

Mutex& WriteMu() {
  static Mutex mu;
  return mu;
}

// The environment is read once as the process starts; raio::Init reads it again.
[[maybe_unused]] const bool kEnvironmentRead = [] {
  (void)ResetToEnvironment();
  return true;
}();

}  // namespace

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kInt:
      return "int";
    case Type::kDouble:
      return "double";
    case Type::kBool:
      return "bool";
    case Type::kBytes:
      return "bytes";
    case Type::kMilliseconds:
      return "milliseconds";
    case Type::kMicroseconds:
      return "microseconds";
    case Type::kLogLevel:
      return "log level";
    case Type::kPath:
      return "path";
  }
  return "?";
}

std::string EnvVarName(std::string_view name) {
  return absl::StrCat("RAIO_", absl::AsciiStrToUpper(A(name)));
}

std::vector<EntryInfo> Describe() {
  std::vector<EntryInfo> out;
  out.reserve(std::size(kEntries));
  for (const Entry& e : kEntries) {
    out.push_back(
        {e.name, e.type, e.unit, e.doc, EnvVarName(e.name), e.default_value(), e.current()});
  }
  return out;
}

std::map<std::string, std::string> CurrentValues() {
  std::map<std::string, std::string> out;
  for (const Entry& e : kEntries) out.emplace(e.name, e.current());
  return out;
}

std::map<std::string, std::string> NonDefaultValues() {
  std::map<std::string, std::string> out;
  for (const Entry& e : kEntries) {
    if (std::string v = e.current(); v != e.default_value()) out.emplace(e.name, std::move(v));
  }
  return out;
}

absl::Status ApplyOverrides(const std::map<std::string, std::string>& overrides,
                            std::string_view source) {
  MutexLock lock(&WriteMu());
  std::vector<std::string> errors;
  for (const auto& [name, text] : overrides) {
    const Entry* e = Find(name);
    if (e == nullptr) {
      errors.push_back(UnknownName(name));
    } else if (absl::Status s = e->apply(name, text, /*commit=*/false); !s.ok()) {
      errors.emplace_back(s.message());
    }
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(A(source), ": ", absl::StrJoin(errors, "; "),
                                                   " (`raio config` lists the names, "
                                                   "types and ranges)"));
  }
  for (const auto& [name, text] : overrides) (void)Find(name)->apply(name, text, /*commit=*/true);
  return absl::OkStatus();
}

absl::Status ResetToEnvironment() { return internal::ResetToEnvironment(environ); }

std::vector<std::string> EnvironmentForWorkers() {
  std::vector<std::string> out;
  for (const auto& [name, value] : NonDefaultValues()) {
    out.push_back(absl::StrCat(EnvVarName(name), "=", value));
  }
  return out;
}

namespace internal {

absl::Status ResetToEnvironment(const char* const* envp) {
  MutexLock lock(&WriteMu());
  // (entry, the variable's value) for each RAIO_<NAME> set and not empty.
  std::vector<std::pair<const Entry*, std::string_view>> found;
  for (const char* const* p = envp; p != nullptr && *p != nullptr; ++p) {
    std::string_view kv(*p);
    if (!kv.starts_with("RAIO_")) continue;
    std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq + 1 == kv.size()) continue;
    for (const Entry& e : kEntries) {
      if (EnvVarName(e.name) == kv.substr(0, eq)) found.emplace_back(&e, kv.substr(eq + 1));
    }
  }
  std::vector<std::string> errors;
  for (const auto& [e, text] : found) {
    if (absl::Status s = e->apply(EnvVarName(e->name), text, /*commit=*/false); !s.ok()) {
      errors.emplace_back(s.message());
    }
  }
  for (const Entry& e : kEntries) e.reset();
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("environment: ", absl::StrJoin(errors, "; "),
                                                   " (`raio config` lists the variables)"));
  }
  for (const auto& [e, text] : found) (void)e->apply(e->name, text, /*commit=*/true);
  return absl::OkStatus();
}

}  // namespace internal

}  // namespace raio::config
