#include "raio/llm/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace raio::llm {
namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

absl::StatusOr<std::map<std::string, FloatTensor>> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = in.tellg();
  in.seekg(0);
  uint64_t n = 0;
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(&n), 8) || n > file_size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad safetensors header length"));
  }
  std::string header(n, '\0');
  in.read(header.data(), n);
  const uint64_t data_size = file_size - 8 - n;
  std::vector<char> data(data_size);
  in.read(data.data(), data_size);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated"));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  }
  std::map<std::string, FloatTensor> out;
  for (auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, ": ", why));
    };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets") || !info["dtype"].is_string() || !info["shape"].is_array() ||
        !info["data_offsets"].is_array() || info["data_offsets"].size() != 2) {
      return bad("needs dtype, shape and data_offsets");
    }
    const std::string dtype = info["dtype"];
    size_t elem = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
    if (elem == 0) return bad(absl::StrCat("unsupported dtype ", dtype));
    FloatTensor t;
    uint64_t count = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) return bad("shape must be non-negative integers");
      t.shape.push_back(d.get<int64_t>());
      count *= d.get<uint64_t>();
    }
    const auto& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) return bad("bad offsets");
    const uint64_t begin = off[0], end = off[1];
    if (begin > end || end > data_size) return bad("data_offsets outside the file");
    if (end - begin != count * elem) return bad("byte size does not match the shape");
    t.data.resize(count);
    const char* p = data.data() + begin;
    for (uint64_t i = 0; i < count; ++i) {
      if (elem == 4) {
        std::memcpy(&t.data[i], p + 4 * i, 4);
      } else {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        t.data[i] = dtype == "F16" ? HalfToFloat(v) : Bf16ToFloat(v);
      }
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

absl::Status WriteSafetensors(const std::map<std::string, FloatTensor>& tensors,
                              const std::string& path) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    uint64_t bytes = t.data.size() * 4;
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data to 8 bytes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot create ", path));
  uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), h.size());
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace raio::llm
