#include "raio/common/placement_resources.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace raio {
namespace {
constexpr std::string_view kInfix = "_group_";
constexpr std::string_view kMarker = "bundle";
}  // namespace

std::optional<PlacementGroupId> PlacementGroupIdFromHex(std::string_view hex) {
  if (hex.size() != 2 * PlacementGroupId::kSize) return std::nullopt;
  std::string lower(hex);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return PlacementGroupId::FromBinary(absl::HexStringToBytes(lower));
}

std::string BundleResourceName(const std::string& resource, const PlacementGroupId& pg,
                               std::optional<int> index) {
  if (index) return absl::StrCat(resource, std::string(kInfix), *index, "_", pg.Hex());
  return absl::StrCat(resource, std::string(kInfix), pg.Hex());
}

ResourceSet CommittedBundleResources(const ResourceSet& bundle, const PlacementGroupId& pg,
                                     int index) {
  ResourceSet out;
  for (const auto& [name, amount] : bundle.fixed()) {
    out.SetFixed(BundleResourceName(name, pg, index), amount);
    out.SetFixed(BundleResourceName(name, pg, std::nullopt), amount);
  }
  const int64_t marker = static_cast<int64_t>(kBundleMarkerCapacity * ResourceSet::kScale);
  out.SetFixed(BundleResourceName(std::string(kMarker), pg, index), marker);
  out.SetFixed(BundleResourceName(std::string(kMarker), pg, std::nullopt), marker);
  return out;
}

ResourceSet PlacementDemand(const ResourceSet& demand, const PlacementGroupId& pg, int index) {
  ResourceSet out;
  std::optional<int> indexed;
  if (index >= 0) indexed = index;
  for (const auto& [name, amount] : demand.fixed()) {
    out.SetFixed(BundleResourceName(name, pg, std::nullopt), amount);
    if (indexed) out.SetFixed(BundleResourceName(name, pg, indexed), amount);
  }
  const int64_t marker = static_cast<int64_t>(kBundleMarkerDemand * ResourceSet::kScale);
  out.SetFixed(BundleResourceName(std::string(kMarker), pg, std::nullopt), marker);
  if (indexed) out.SetFixed(BundleResourceName(std::string(kMarker), pg, indexed), marker);
  return out;
}

std::optional<ParsedBundleResource> ParseBundleResource(const std::string& name) {
  // <base>_group_[<index>_]<16 hex digits>
  constexpr std::size_t kHex = 2 * PlacementGroupId::kSize;
  if (name.size() < kHex + kInfix.size() + 1) return std::nullopt;
  std::string_view hex = std::string_view(name).substr(name.size() - kHex);
  std::optional<PlacementGroupId> pg = PlacementGroupIdFromHex(hex);
  if (!pg) return std::nullopt;
  std::string_view rest = std::string_view(name).substr(0, name.size() - kHex);
  ParsedBundleResource out;
  out.pg = *pg;
  if (rest.size() > kInfix.size() && rest.substr(rest.size() - kInfix.size()) == kInfix) {
    out.base = std::string(rest.substr(0, rest.size() - kInfix.size()));
    return out;
  }
  // <base>_group_<index>_
  if (rest.empty() || rest.back() != '_') return std::nullopt;
  rest.remove_suffix(1);
  std::size_t digits = rest.find_last_not_of("0123456789");
  if (digits == std::string_view::npos || digits + 1 == rest.size()) return std::nullopt;
  int index = 0;
  if (!absl::SimpleAtoi(std::string(rest.substr(digits + 1)), &index)) return std::nullopt;
  rest = rest.substr(0, digits + 1);
  if (rest.size() <= kInfix.size() || rest.substr(rest.size() - kInfix.size()) != kInfix) {
    return std::nullopt;
  }
  out.base = std::string(rest.substr(0, rest.size() - kInfix.size()));
  out.index = index;
  return out;
}

std::string DemandFitsBundles(const ResourceSet& demand,
                              const std::vector<std::map<std::string, double>>& bundles,
                              int first_index, const std::string& pg_hex) {
  std::vector<std::string> held;
  for (std::size_t i = 0; i < bundles.size(); ++i) {
    auto bundle = ResourceSet::FromMap(bundles[i]);
    if (bundle.ok() && bundle->Contains(demand)) return "";
    held.push_back(absl::StrCat("#", first_index + static_cast<int>(i), " ",
                                bundle.ok() ? bundle->ToString() : std::string("?")));
  }
  if (bundles.size() == 1) {
    return absl::StrCat("demands ", demand.ToString(), ", which its bundle ", held[0],
                        " of placement group ", pg_hex,
                        " cannot hold; work in a group takes its resources from its bundle only "
                        "(a task's default demand is {CPU: 1}: set a smaller one with "
                        "SetResources)");
  }
  return absl::StrCat("demands ", demand.ToString(), ", which no bundle of placement group ",
                      pg_hex, " holds (", absl::StrJoin(held, ", "),
                      "); work in a group takes its resources from its bundle only");
}

ResourceSet RawResources(const ResourceSet& resources) {
  ResourceSet out;
  for (const auto& [name, amount] : resources.fixed()) {
    if (!ParseBundleResource(name)) out.SetFixed(name, amount);
  }
  return out;
}

}  // namespace raio
