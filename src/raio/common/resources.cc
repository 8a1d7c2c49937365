#include "raio/common/resources.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace raio {

absl::StatusOr<ResourceSet> ResourceSet::FromMap(const std::map<std::string, double>& amounts) {
  ResourceSet out;
  for (const auto& [name, value] : amounts) {
    if (name.empty()) return absl::InvalidArgumentError("resource name must not be empty");
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource '", name, "' must be a finite amount >= 0, got ", value));
    }
    if (value > kMaxAmount) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resource '", name, "' amount ", value, " is too large: the limit is 1e14 per resource"));
    }
    int64_t fixed = static_cast<int64_t>(std::llround(value * kScale));
    if (fixed == 0 && value > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource '", name, "' amount ", value, " is below the 0.0001 resolution"));
    }
    if (fixed != 0) out.amounts_[name] = fixed;
  }
  return out;
}

absl::StatusOr<ResourceSet> ResourceSet::FromProto(const proto::ResourceSet& p) {
  return FromMap(std::map<std::string, double>(p.amounts().begin(), p.amounts().end()));
}

void ResourceSet::ToProto(proto::ResourceSet* p) const {
  auto* m = p->mutable_amounts();
  for (const auto& [name, v] : amounts_) (*m)[name] = static_cast<double>(v) / kScale;
}

std::map<std::string, double> ResourceSet::ToMap() const {
  std::map<std::string, double> out;
  for (const auto& [name, v] : amounts_) out[name] = static_cast<double>(v) / kScale;
  return out;
}

double ResourceSet::Get(const std::string& name) const {
  return static_cast<double>(GetFixed(name)) / kScale;
}

int64_t ResourceSet::GetFixed(const std::string& name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? 0 : it->second;
}

void ResourceSet::SetFixed(const std::string& name, int64_t amount) {
  if (amount == 0) {
    amounts_.erase(name);
  } else {
    amounts_[name] = amount;
  }
}

bool ResourceSet::Contains(const ResourceSet& demand) const {
  for (const auto& [name, v] : demand.amounts_) {
    if (GetFixed(name) < v) return false;
  }
  return true;
}

void ResourceSet::Add(const ResourceSet& other) {
  for (const auto& [name, v] : other.amounts_) SetFixed(name, GetFixed(name) + v);
}

void ResourceSet::Subtract(const ResourceSet& other) {
  for (const auto& [name, v] : other.amounts_) SetFixed(name, GetFixed(name) - v);
}

namespace {
std::string FormatAmount(const std::string& name, int64_t fixed) {
  double v = static_cast<double>(fixed) / ResourceSet::kScale;
  char buf[64];
  if (name == "memory" || name == "object_store_memory") {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}
}  // namespace

std::string ResourceSet::ToString() const {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, v] : amounts_) {
    absl::StrAppend(&out, first ? "" : ", ", name, ": ", FormatAmount(name, v));
    first = false;
  }
  return out + "}";
}

std::string ResourceSet::Key() const {
  std::string out;
  for (const auto& [name, v] : amounts_) absl::StrAppend(&out, name, "=", v, ";");
  return out;
}

}  // namespace raio
