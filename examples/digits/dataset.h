// The UCI optical-recognition-of-handwritten-digits data set (8x8 images, 1,797 rows),
// as shipped by scikit-learn in digits.csv.gz: each row is 64 pixel values in 0..16
// followed by the label 0..9.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace digits {

inline constexpr int kNumFeatures = 64;
inline constexpr int kNumClasses = 10;
inline constexpr const char* kDefaultDataPath =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

// Rows of features (row-major, size() = num_rows * kNumFeatures, scaled to [0, 1]) and
// labels (0..9).
struct Dataset {
  std::vector<float> x;
  std::vector<int32_t> y;
  int NumRows() const { return static_cast<int>(y.size()); }
};

// Reads a CSV file, gzip-compressed when the name ends in ".gz" (decompressed by
// running `gzip -dc`). Keeps the first `max_rows` rows (0: all). Throws
// std::runtime_error naming the file and line when the file is missing or unreadable, a
// row does not have 65 columns, a value is not a number, a pixel is outside 0..16 or a
// label outside 0..9, or there are no rows.
Dataset LoadDigitsCsv(const std::string& path, int max_rows = 0);

// The rows at `indices`, in that order.
Dataset Select(const Dataset& data, const std::vector<int>& indices);

struct Split {
  Dataset train;
  Dataset validation;
  Dataset test;
};

// Shuffles the rows with `seed` and cuts them 60% / 20% / 20%.
Split SplitDataset(const Dataset& data, uint64_t seed);

// Cuts `data` into `num_shards` shards by striding: shard i holds rows i, i + n, ...
std::vector<Dataset> Shard(const Dataset& data, int num_shards);

}  // namespace digits
