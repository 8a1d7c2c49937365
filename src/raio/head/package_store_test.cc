// PackageStore (the head's job packages) and Sha256, alone: uploads in order, resumed,
// out of order, corrupted; reads; names that are not digests.
#include "raio/head/package_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "raio/common/sha256.h"
#include "raio/testkit/temp_dir.h"

namespace raio::head {
namespace {

constexpr uint64_t kUploader = 7;

std::string Digest(const std::string& bytes) {
  Sha256 sha;
  sha.Update(bytes);
  return sha.HexDigest();
}

TEST(Sha256Test, MatchesTheFipsVectorsAndHashesFilesAndPieces) {
  EXPECT_EQ(Digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 pieces;
  pieces.Update("a");
  pieces.Update("bc");
  EXPECT_EQ(pieces.HexDigest(), Digest("abc"));
  testkit::TempDir dir;
  const std::string big(3 << 20, 'q');  // over the 1 MiB read size
  std::ofstream(dir.Path("f"), std::ios::binary) << big;
  EXPECT_EQ(*Sha256OfFile(dir.Path("f")), Digest(big));
  EXPECT_EQ(Sha256OfFile(dir.Path("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(IsSha256Hex(Digest("x")));
  EXPECT_FALSE(IsSha256Hex("../../etc/passwd"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
}

TEST(PackageStoreTest, KeepsAFileUploadedInChunksOnceItsDigestMatches) {
  testkit::TempDir dir;
  PackageStore store(dir.Path("packages"));
  const std::string bytes = "0123456789abcdefghij";
  const std::string sha = Digest(bytes);
  EXPECT_FALSE(store.Has(sha, bytes.size()));
  ASSERT_TRUE(store.Write(kUploader, sha, bytes.size(), 0, bytes.substr(0, 7)).ok());
  EXPECT_FALSE(store.Has(sha, bytes.size()));  // not while a part is missing
  ASSERT_TRUE(store.Write(kUploader, sha, bytes.size(), 7, bytes.substr(7)).ok());
  EXPECT_TRUE(store.Has(sha, bytes.size()));
  EXPECT_FALSE(store.Has(sha, bytes.size() + 1));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("packages/" + sha + ".7.part")));
  uint64_t size = 0;
  EXPECT_EQ(*store.Read(sha, 0, 1000, &size), bytes);
  EXPECT_EQ(size, bytes.size());
  EXPECT_EQ(*store.Read(sha, 15, 3, &size), "fgh");
  EXPECT_EQ(*store.Read(sha, 20, 3, &size), "");
  // Uploading it again is a no-op, from any offset.
  EXPECT_TRUE(store.Write(kUploader, sha, bytes.size(), 5, "zz").ok());
  EXPECT_EQ(*store.Read(sha, 0, 1000, &size), bytes);
  // An empty file is one empty chunk.
  EXPECT_TRUE(store.Write(kUploader, Digest(""), 0, 0, "").ok());
  EXPECT_TRUE(store.Has(Digest(""), 0));
}

TEST(PackageStoreTest, RefusesChunksOutOfOrderBadDigestsAndBadNames) {
  testkit::TempDir dir;
  PackageStore store(dir.Path("packages"));
  const std::string bytes = "some executable bytes";
  const std::string sha = Digest(bytes);
  EXPECT_EQ(store.Write(kUploader, sha, bytes.size(), 4, "x").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Write(kUploader, sha, bytes.size(), 0, bytes.substr(0, 4)).ok());
  absl::Status gap = store.Write(kUploader, sha, bytes.size(), 9, bytes.substr(9));
  EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gap.message().find("does not follow"), std::string::npos) << gap;
  // The upload was dropped: offset 0 starts again and finishes.
  ASSERT_TRUE(store.Write(kUploader, sha, bytes.size(), 0, bytes).ok());
  EXPECT_TRUE(store.Has(sha, bytes.size()));
  // Bytes that do not hash to the name: refused and not kept.
  const std::string other = Digest("something else");
  absl::Status lie = store.Write(kUploader, other, bytes.size(), 0, bytes);
  EXPECT_EQ(lie.code(), absl::StatusCode::kDataLoss) << lie;
  EXPECT_FALSE(store.Has(other, bytes.size()));
  EXPECT_FALSE(std::filesystem::exists(dir.Path("packages/" + other + ".7.part")));
  // More bytes than announced.
  EXPECT_EQ(store.Write(kUploader, Digest("ab"), 2, 0, "abc").code(),
            absl::StatusCode::kInvalidArgument);
  // Names that are not digests never reach the filesystem.
  EXPECT_EQ(store.Write(kUploader, "../escape", 1, 0, "x").code(),
            absl::StatusCode::kInvalidArgument);
  uint64_t size = 0;
  EXPECT_EQ(store.Read("../escape", 0, 10, &size).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Read(Digest("never uploaded"), 0, 10, &size).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Write(kUploader, sha, PackageStore::kMaxFileBytes + 1, 0, "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PackageStoreTest, TwoUploadersOfOneFileAtOnceBothSucceedAndAClosedOneLeavesNothing) {
  testkit::TempDir dir;
  PackageStore store(dir.Path("packages"));
  const std::string bytes(3000, 'b');
  const std::string sha = Digest(bytes);
  // Interleaved, each from offset 0: neither disturbs the other.
  ASSERT_TRUE(store.Write(1, sha, bytes.size(), 0, bytes.substr(0, 1000)).ok());
  ASSERT_TRUE(store.Write(2, sha, bytes.size(), 0, bytes.substr(0, 1000)).ok());
  ASSERT_TRUE(store.Write(1, sha, bytes.size(), 1000, bytes.substr(1000, 1000)).ok());
  ASSERT_TRUE(store.Write(2, sha, bytes.size(), 1000, bytes.substr(1000, 1000)).ok());
  ASSERT_TRUE(store.Write(1, sha, bytes.size(), 2000, bytes.substr(2000)).ok());
  EXPECT_TRUE(store.Has(sha, bytes.size()));
  // The second one's last chunk finds the file kept: fine, and its part is gone.
  ASSERT_TRUE(store.Write(2, sha, bytes.size(), 2000, bytes.substr(2000)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Path("packages/" + sha + ".2.part")));
  // A third that goes away half-way (its connection closed) leaves no part behind.
  const std::string other(2000, 'c');
  ASSERT_TRUE(store.Write(3, Digest(other), other.size(), 0, other.substr(0, 500)).ok());
  store.AbortUploadsOf(3);
  EXPECT_FALSE(std::filesystem::exists(dir.Path("packages/" + Digest(other) + ".3.part")));
  EXPECT_EQ(store.Write(3, Digest(other), other.size(), 500, other.substr(500)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PackageStoreTest, AnUnfinishedUploadLeavesNothingWhenTheStoreGoes) {
  testkit::TempDir dir;
  const std::string sha = Digest("0123456789");
  {
    PackageStore store(dir.Path("packages"));
    ASSERT_TRUE(store.Write(kUploader, sha, 10, 0, "01234").ok());
    EXPECT_TRUE(std::filesystem::exists(dir.Path("packages/" + sha + ".7.part")));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.Path("packages")));
}

}  // namespace
}  // namespace raio::head
