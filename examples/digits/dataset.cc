#include "dataset.h"

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string_view>

namespace digits {
namespace {

[[noreturn]] void Fail(const std::string& path, int line, const std::string& what) {
  throw std::runtime_error(path + ":" + std::to_string(line) + ": " + what);
}

// Parses one CSV row into 64 features and a label.
void ParseRow(std::string_view row, const std::string& path, int line, Dataset& out) {
  if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
  int column = 0;
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = row.find(',', pos);
    std::string_view cell =
        row.substr(pos, comma == std::string_view::npos ? row.npos : comma - pos);
    while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
    while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
    double value = 0;
    auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
    if (cell.empty() || ec != std::errc() || end != cell.data() + cell.size()) {
      Fail(path, line,
           "column " + std::to_string(column + 1) + ": not a number: '" + std::string(cell) + "'");
    }
    if (column < kNumFeatures) {
      if (!(value >= 0 && value <= 16)) {  // also rejects NaN
        Fail(path, line,
             "column " + std::to_string(column + 1) + ": pixel value " + std::string(cell) +
                 " is outside 0..16");
      }
      out.x.push_back(static_cast<float>(value / 16.0));
    } else if (column == kNumFeatures) {
      if (!(value >= 0 && value <= 9) || value != static_cast<int>(value)) {
        Fail(path, line, "label " + std::string(cell) + " is not an integer in 0..9");
      }
      out.y.push_back(static_cast<int32_t>(value));
    }
    ++column;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (column != kNumFeatures + 1) {
    Fail(path, line,
         "expected " + std::to_string(kNumFeatures + 1) +
             " columns (64 pixels and a label), found " + std::to_string(column));
  }
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Dataset LoadDigitsCsv(const std::string& path, int max_rows) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error("data file not found: " + path +
                             " (install python3-sklearn, or pass --data PATH)");
  }
  bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::FILE* file = gz ? popen(("gzip -dc -- " + ShellQuote(path) + " 2>/dev/null").c_str(), "r")
                       : std::fopen(path.c_str(), "r");
  if (file == nullptr) throw std::runtime_error("cannot open data file: " + path);
  Dataset data;
  std::string line;
  int line_number = 0;
  bool truncated = false;
  char chunk[4096];
  auto flush_line = [&] {
    ++line_number;
    if (line.empty() || line == "\r") return;
    if (max_rows > 0 && data.NumRows() >= max_rows) {
      truncated = true;
      return;
    }
    ParseRow(line, path, line_number, data);
  };
  try {
    while (!truncated && std::fgets(chunk, sizeof(chunk), file) != nullptr) {
      std::string_view piece(chunk);
      if (!piece.empty() && piece.back() == '\n') {
        piece.remove_suffix(1);
        line.append(piece);
        flush_line();
        line.clear();
      } else {
        line.append(piece);
      }
    }
    if (!truncated && !line.empty()) flush_line();
  } catch (...) {
    int status = gz ? pclose(file) : std::fclose(file);
    // A parse error on a gzip stream that itself failed means the file is damaged.
    if (gz && !truncated && status != 0) {
      throw std::runtime_error("cannot read data file: " + path +
                               " (gzip -dc failed: truncated or not a gzip file?)");
    }
    throw;
  }
  int status = gz ? pclose(file) : std::fclose(file);
  // A truncated read closes gzip's pipe early (SIGPIPE): only a full read checks status.
  if (!truncated && status != 0) {
    throw std::runtime_error("cannot read data file: " + path +
                             (gz ? " (gzip -dc failed: not a gzip file?)" : ""));
  }
  if (data.NumRows() == 0) throw std::runtime_error("data file has no rows: " + path);
  return data;
}

Dataset Select(const Dataset& data, const std::vector<int>& indices) {
  Dataset out;
  out.x.reserve(indices.size() * kNumFeatures);
  out.y.reserve(indices.size());
  for (int i : indices) {
    out.x.insert(out.x.end(), data.x.begin() + static_cast<std::ptrdiff_t>(i) * kNumFeatures,
                 data.x.begin() + static_cast<std::ptrdiff_t>(i + 1) * kNumFeatures);
    out.y.push_back(data.y[i]);
  }
  return out;
}

Split SplitDataset(const Dataset& data, uint64_t seed) {
  int n = data.NumRows();
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (int i = n - 1; i > 0; --i) {  // Fisher-Yates, identical on every platform
    std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  }
  int n_train = n * 6 / 10;
  int n_val = n * 2 / 10;
  Split split;
  split.train = Select(data, {order.begin(), order.begin() + n_train});
  split.validation = Select(data, {order.begin() + n_train, order.begin() + n_train + n_val});
  split.test = Select(data, {order.begin() + n_train + n_val, order.end()});
  return split;
}

std::vector<Dataset> Shard(const Dataset& data, int num_shards) {
  std::vector<Dataset> shards(num_shards);
  for (int s = 0; s < num_shards; ++s) {
    std::vector<int> rows;
    for (int i = s; i < data.NumRows(); i += num_shards) rows.push_back(i);
    shards[s] = Select(data, rows);
  }
  return shards;
}

}  // namespace digits
