// ResourceSet: amounts of named resources in fixed point (1/10000 of a unit), so that
// adding and subtracting fractional demands never drifts. Units: CPU and GPU in devices,
// memory in bytes, custom resources in the user's units.
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "raio/common.pb.h"

namespace raio {

class ResourceSet {
 public:
  static constexpr int64_t kScale = 10000;
  // Largest amount of one resource (1e14: a hundred TB of memory in bytes), so that sums of
  // fixed-point amounts cannot overflow.
  static constexpr double kMaxAmount = 1e14;

  ResourceSet() = default;
  // Validates and converts: every amount must be finite and >= 0; zero entries are
  // dropped. InvalidArgument names the bad entry.
  static absl::StatusOr<ResourceSet> FromMap(const std::map<std::string, double>& amounts);
  static absl::StatusOr<ResourceSet> FromProto(const proto::ResourceSet& p);
  void ToProto(proto::ResourceSet* p) const;
  std::map<std::string, double> ToMap() const;

  double Get(const std::string& name) const;
  int64_t GetFixed(const std::string& name) const;
  void SetFixed(const std::string& name, int64_t amount);

  // Whether every amount in `demand` is available here.
  bool Contains(const ResourceSet& demand) const;
  void Add(const ResourceSet& other);
  // May go below zero (a blocked worker's CPUs lent out and taken back).
  void Subtract(const ResourceSet& other);
  bool empty() const { return amounts_.empty(); }
  const std::map<std::string, int64_t>& fixed() const { return amounts_; }

  // "{CPU: 2, GPU: 0.5, memory: 1.0 GiB}".
  std::string ToString() const;
  // A stable key for grouping tasks of equal demand.
  std::string Key() const;
  bool operator==(const ResourceSet& o) const { return amounts_ == o.amounts_; }

 private:
  std::map<std::string, int64_t> amounts_;
};

}  // namespace raio
