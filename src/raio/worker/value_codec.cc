#include "raio/worker/value_codec.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace raio::worker {

void AppendMsgpackArrayHeader(std::string* out, uint32_t n) {
  if (n < 16) {
    out->push_back(static_cast<char>(0x90 | n));
  } else if (n <= 0xffff) {
    out->push_back(static_cast<char>(0xdc));
    out->push_back(static_cast<char>(n >> 8));
    out->push_back(static_cast<char>(n & 0xff));
  } else {
    out->push_back(static_cast<char>(0xdd));
    for (int shift = 24; shift >= 0; shift -= 8) {
      out->push_back(static_cast<char>((n >> shift) & 0xff));
    }
  }
}

namespace {
template <typename E>
void AppendArray(std::string_view bytes, std::string* out) {
  std::vector<E> values(bytes.size() / sizeof(E));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(E));
  internal::StringWriter writer{out};
  msgpack::pack(writer, values);
}
}  // namespace

absl::Status AppendAsMsgpack(const internal::ValueView& value, std::string* out) {
  using internal::DType;
  switch (value.format) {
    case internal::ValueFormat::kReturns:
      return absl::InvalidArgumentError("packed return values are not a value");
    case internal::ValueFormat::kMsgpack:
      out->append(value.bytes);
      return absl::OkStatus();
    case internal::ValueFormat::kRaw: {
      internal::StringWriter writer{out};
      msgpack::packer<internal::StringWriter> packer(writer);
      packer.pack_bin(static_cast<uint32_t>(value.bytes.size()));
      packer.pack_bin_body(value.bytes.data(), static_cast<uint32_t>(value.bytes.size()));
      return absl::OkStatus();
    }
    case internal::ValueFormat::kArray:
      switch (value.dtype) {
        case DType::kI8:
          AppendArray<int8_t>(value.bytes, out);
          break;
        case DType::kU8:
          AppendArray<uint8_t>(value.bytes, out);
          break;
        case DType::kChar:
          AppendArray<char>(value.bytes, out);
          break;
        case DType::kI16:
          AppendArray<int16_t>(value.bytes, out);
          break;
        case DType::kU16:
          AppendArray<uint16_t>(value.bytes, out);
          break;
        case DType::kI32:
          AppendArray<int32_t>(value.bytes, out);
          break;
        case DType::kU32:
          AppendArray<uint32_t>(value.bytes, out);
          break;
        case DType::kI64:
          AppendArray<int64_t>(value.bytes, out);
          break;
        case DType::kU64:
          AppendArray<uint64_t>(value.bytes, out);
          break;
        case DType::kF32:
          AppendArray<float>(value.bytes, out);
          break;
        case DType::kF64:
          AppendArray<double>(value.bytes, out);
          break;
        default:
          return absl::InvalidArgumentError("array with an unknown element type");
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("value of an unknown format");
}

absl::StatusOr<std::vector<internal::ValueView>> UnpackReturns(std::string_view packed) {
  std::vector<internal::ValueView> parts;
  std::size_t pos = 0;
  while (pos < packed.size()) {
    if (packed.size() - pos < 10) {
      return absl::InvalidArgumentError("truncated header of a return value");
    }
    auto format = static_cast<uint8_t>(packed[pos]);
    auto dtype = static_cast<uint8_t>(packed[pos + 1]);
    uint64_t n = 0;
    std::memcpy(&n, packed.data() + pos + 2, sizeof(n));
    pos += 10;
    if (format > static_cast<uint8_t>(internal::ValueFormat::kArray)) {
      return absl::InvalidArgumentError(absl::StrCat("return value of unknown format ", format));
    }
    if (n > packed.size() - pos) {
      return absl::InvalidArgumentError(absl::StrCat("return value of ", n, " bytes overruns the ",
                                                     packed.size(), " bytes packed"));
    }
    parts.push_back(internal::ValueView{static_cast<internal::ValueFormat>(format),
                                        static_cast<internal::DType>(dtype), packed.substr(pos, n),
                                        nullptr});
    pos += n;
  }
  return parts;
}

}  // namespace raio::worker
