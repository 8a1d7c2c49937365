#include "raio/rpc/frame.h"

#include <array>
#include <cstring>

#include "gtest/gtest.h"

namespace raio::rpc {
namespace {

using Bytes = std::array<char, kFrameHeaderBytes>;

Bytes Encode(const FrameHeader& h) {
  Bytes out{};
  EncodeFrameHeader(h, out.data());
  return out;
}

TEST(FrameTest, RoundTripPreservesEveryField) {
  for (FrameKind kind :
       {FrameKind::kRequest, FrameKind::kReply, FrameKind::kError, FrameKind::kOneWay}) {
    FrameHeader in{kind, 0xDEADBEEFu, 0x0123456789ABCDEFull, 4096};
    Bytes bytes = Encode(in);
    FrameHeader out;
    ASSERT_TRUE(DecodeFrameHeader(bytes.data(), 1u << 20, &out).ok());
    EXPECT_EQ(out.kind, kind);
    EXPECT_EQ(out.method, 0xDEADBEEFu);
    EXPECT_EQ(out.request_id, 0x0123456789ABCDEFull);
    EXPECT_EQ(out.body_bytes, 4096u);
  }
}

TEST(FrameTest, LayoutMatchesTheDocumentedWireFormat) {
  Bytes b = Encode({FrameKind::kError, 7, 0x1122334455667788ull, 300});
  auto u8 = [&](int i) { return static_cast<uint8_t>(b[i]); };
  EXPECT_EQ(u8(0), 0x41);  // magic 0x5241, little-endian: 'A' then 'R'
  EXPECT_EQ(u8(1), 0x52);
  EXPECT_EQ(u8(2), kFrameVersion);
  EXPECT_EQ(u8(3), 2);  // kError
  EXPECT_EQ(u8(4), 7);
  EXPECT_EQ(u8(5), 0);
  EXPECT_EQ(u8(8), 0x88);
  EXPECT_EQ(u8(15), 0x11);
  EXPECT_EQ(u8(16), 300 & 0xff);
  EXPECT_EQ(u8(17), 300 >> 8);
}

TEST(FrameTest, BodyExactlyAtTheLimitIsAccepted) {
  Bytes b = Encode({FrameKind::kRequest, 1, 1, 1000});
  FrameHeader out;
  EXPECT_TRUE(DecodeFrameHeader(b.data(), 1000, &out).ok());
  EXPECT_EQ(out.body_bytes, 1000u);
}

TEST(FrameTest, RejectsBadMagic) {
  Bytes b = Encode({FrameKind::kRequest, 1, 1, 0});
  b[0] = 'X';
  FrameHeader out;
  absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("magic"), std::string_view::npos) << s;
}

TEST(FrameTest, RejectsUnsupportedVersion) {
  Bytes b = Encode({FrameKind::kRequest, 1, 1, 0});
  b[2] = static_cast<char>(kTailFrameVersion + 1);
  FrameHeader out;
  absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("version"), std::string_view::npos) << s;
  absl::StatusOr<std::size_t> parsed =
      ParseFrameHeader(std::string_view(b.data(), b.size()), 1000, &out);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("version 3"), std::string_view::npos) << parsed.status();
}

TEST(FrameTest, RejectsUnknownKind) {
  Bytes b = Encode({FrameKind::kRequest, 1, 1, 0});
  FrameHeader out;
  for (int kind : {4, 0x7f, 0xff}) {
    b[3] = static_cast<char>(kind);
    absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "kind " << kind;
    EXPECT_NE(s.message().find("kind"), std::string_view::npos) << s;
  }
}

TEST(FrameTest, RejectsBodyOverTheLimit) {
  Bytes b = Encode({FrameKind::kReply, 1, 1, 1001});
  FrameHeader out;
  absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1001"), std::string_view::npos) << s;

  Bytes huge = Encode({FrameKind::kReply, 1, 1, 0xFFFFFFFFu});
  EXPECT_EQ(DecodeFrameHeader(huge.data(), 512u << 20, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

using TailBytes = std::array<char, kTailFrameHeaderBytes>;

TEST(FrameTest, FrameWithATailHasAVersion2HeaderWithItsLength) {
  TailBytes b{};
  EXPECT_EQ(
      EncodeFrameHeader({FrameKind::kReply, 37, 0x1122334455667788ull, 70000, 65536}, b.data()),
      kTailFrameHeaderBytes);
  auto u8 = [&](int i) { return static_cast<uint8_t>(b[i]); };
  EXPECT_EQ(u8(2), kTailFrameVersion);
  EXPECT_EQ(u8(3), 1);      // kReply
  EXPECT_EQ(u8(20), 0x00);  // tail length 65536, little-endian
  EXPECT_EQ(u8(21), 0x00);
  EXPECT_EQ(u8(22), 0x01);
  EXPECT_EQ(u8(23), 0x00);
  FrameHeader out;
  absl::StatusOr<std::size_t> n =
      ParseFrameHeader(std::string_view(b.data(), b.size()), 1u << 20, &out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kTailFrameHeaderBytes);
  EXPECT_EQ(out.kind, FrameKind::kReply);
  EXPECT_EQ(out.method, 37u);
  EXPECT_EQ(out.request_id, 0x1122334455667788ull);
  EXPECT_EQ(out.body_bytes, 70000u);
  EXPECT_EQ(out.tail_bytes, 65536u);
  EXPECT_EQ(FrameHeaderBytes(out), kTailFrameHeaderBytes);
}

TEST(FrameTest, FrameWithoutATailIsVersion1ByteForByte) {
  Bytes b = Encode({FrameKind::kRequest, 5, 9, 12, 0});
  EXPECT_EQ(static_cast<uint8_t>(b[2]), kFrameVersion);
  FrameHeader out;
  absl::StatusOr<std::size_t> n = ParseFrameHeader(std::string_view(b.data(), b.size()), 100, &out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kFrameHeaderBytes);
  EXPECT_EQ(out.tail_bytes, 0u);
  EXPECT_TRUE(DecodeFrameHeader(b.data(), 100, &out).ok());
}

TEST(FrameTest, ParseWaitsForTheWholeHeaderOfEitherVersion) {
  Bytes v1 = Encode({FrameKind::kRequest, 5, 9, 12});
  TailBytes v2{};
  EncodeFrameHeader({FrameKind::kReply, 5, 9, 12, 4}, v2.data());
  FrameHeader out;
  for (std::size_t n = 0; n < kFrameHeaderBytes; ++n) {
    EXPECT_EQ(*ParseFrameHeader(std::string_view(v1.data(), n), 100, &out), 0u) << n;
  }
  for (std::size_t n = 0; n < kTailFrameHeaderBytes; ++n) {
    EXPECT_EQ(*ParseFrameHeader(std::string_view(v2.data(), n), 100, &out), 0u) << n;
  }
  // A bad first part is refused as soon as it is there, before the tail length comes.
  v2[3] = 9;
  EXPECT_EQ(
      ParseFrameHeader(std::string_view(v2.data(), kFrameHeaderBytes), 100, &out).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, RejectsATailLongerThanTheBody) {
  TailBytes b{};
  EncodeFrameHeader({FrameKind::kReply, 1, 1, 100, 100}, b.data());
  FrameHeader out;
  EXPECT_TRUE(ParseFrameHeader(std::string_view(b.data(), b.size()), 1000, &out).ok());
  std::uint32_t longer = 101;
  std::memcpy(b.data() + 20, &longer, sizeof(longer));
  absl::StatusOr<std::size_t> n =
      ParseFrameHeader(std::string_view(b.data(), b.size()), 1000, &out);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("tail of 101 bytes"), std::string_view::npos) << n.status();
  // The body limit counts the tail too.
  EncodeFrameHeader({FrameKind::kReply, 1, 1, 1001, 1000}, b.data());
  EXPECT_EQ(ParseFrameHeader(std::string_view(b.data(), b.size()), 1000, &out).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, DecodeFrameHeaderRefusesAVersion2HeaderItCannotReadWhole) {
  TailBytes b{};
  EncodeFrameHeader({FrameKind::kReply, 1, 1, 100, 10}, b.data());
  FrameHeader out;
  absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("version 2"), std::string_view::npos) << s;
}

}  // namespace
}  // namespace raio::rpc
