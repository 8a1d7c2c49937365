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
  b[2] = static_cast<char>(kFrameVersion + 1);
  FrameHeader out;
  absl::Status s = DecodeFrameHeader(b.data(), 1000, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("version"), std::string_view::npos) << s;
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

}  // namespace
}  // namespace raio::rpc
