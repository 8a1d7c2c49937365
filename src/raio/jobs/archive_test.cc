#include "raio/jobs/archive.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace raio::jobs {
namespace {

namespace fs = std::filesystem;

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("raio-archive-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_ / "src" / "sub");
    fs::create_directories(root_ / "src" / "build");
    fs::create_directories(root_ / "dest");
    Write(root_ / "src" / "run.sh", "#!/bin/sh\necho hi\n");
    ::chmod((root_ / "src" / "run.sh").c_str(), 0755);
    Write(root_ / "src" / "sub" / "data.txt", "data");
    Write(root_ / "src" / "build" / "big.o", std::string(1000, 'x'));
  }
  void TearDown() override { fs::remove_all(root_); }
  static void Write(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  fs::path root_;
};

TEST_F(ArchiveTest, PacksAndUnpacksWithModesAndExcludes) {
  auto zip = PackDirectory((root_ / "src").string(), {"build"}, 1 << 20);
  ASSERT_TRUE(zip.ok()) << zip.status();
  ASSERT_TRUE(UnpackArchive(*zip, (root_ / "dest").string()).ok());
  EXPECT_EQ(Read(root_ / "dest" / "run.sh"), "#!/bin/sh\necho hi\n");
  EXPECT_EQ(Read(root_ / "dest" / "sub" / "data.txt"), "data");
  EXPECT_FALSE(fs::exists(root_ / "dest" / "build"));
  EXPECT_EQ(::access((root_ / "dest" / "run.sh").c_str(), X_OK), 0);
  EXPECT_EQ(ListRegularFiles((root_ / "dest").string()),
            (std::vector<std::string>{"run.sh", "sub/data.txt"}));
}

TEST_F(ArchiveTest, APackageIsTheZipWithoutPadding) {
  // Two small files: a few hundred bytes of zip, not a 10 KiB block of mostly zeros (the
  // server's limit would count the padding).
  auto zip = PackDirectory((root_ / "src").string(), {"build"}, 1 << 20);
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_LT(zip->size(), 1024u);
  // The zip ends with its end-of-central-directory record (PK\5\6, 22 bytes, no comment).
  ASSERT_GE(zip->size(), 22u);
  EXPECT_EQ(zip->substr(zip->size() - 22, 4), std::string("PK\x05\x06"));
}

TEST_F(ArchiveTest, RefusesADirectoryOverTheLimit) {
  auto zip = PackDirectory((root_ / "src").string(), {}, 100);
  EXPECT_EQ(zip.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(PackDirectory((root_ / "nothing").string(), {}, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ArchiveTest, SymlinksArePackedUnderTheirOwnNameWithTheTargetsContent) {
  // Broke: names were resolved through links, so a.txt became a link to itself.
  const fs::path src = root_ / "src";
  fs::create_symlink("run.sh", src / "zz.txt");
  fs::create_symlink("sub", src / "linkdir");
  fs::create_symlink(src / "sub" / "data.txt", src / "abs.txt");
  Write(root_ / "outside.txt", "outside");
  fs::create_symlink("../outside.txt", src / "up.txt");
  fs::create_symlink(".", src / "sub" / "loop");
  fs::create_symlink("missing", src / "dangling");
  auto zip = PackDirectory(src.string(), {"build"}, 1 << 20);
  ASSERT_TRUE(zip.ok()) << zip.status();
  const fs::path dest = root_ / "dest";
  ASSERT_TRUE(UnpackArchive(*zip, dest.string()).ok());
  EXPECT_EQ(Read(dest / "run.sh"), "#!/bin/sh\necho hi\n");
  EXPECT_FALSE(fs::is_symlink(dest / "run.sh"));
  EXPECT_EQ(Read(dest / "zz.txt"), "#!/bin/sh\necho hi\n");
  EXPECT_FALSE(fs::is_symlink(dest / "zz.txt"));
  EXPECT_EQ(Read(dest / "linkdir" / "data.txt"), "data");
  EXPECT_EQ(Read(dest / "abs.txt"), "data");
  EXPECT_EQ(Read(dest / "up.txt"), "outside");
  EXPECT_FALSE(fs::exists(dest / "sub" / "loop"));
  EXPECT_FALSE(fs::exists(dest / "dangling"));
  EXPECT_EQ(ListRegularFiles(dest.string()),
            (std::vector<std::string>{"abs.txt", "linkdir/data.txt", "run.sh", "sub/data.txt",
                                      "up.txt", "zz.txt"}));
}

TEST_F(ArchiveTest, UnpackRefusesASymlinkLeadingOutside) {
  // A hand-made tar (the HTTP API takes any package): a link to /etc, then a file through
  // it, must not write outside the job directory.
  const fs::path tarball = root_ / "evil.tar";
  const fs::path stage = root_ / "stage";
  fs::create_directories(stage);
  fs::create_symlink(root_ / "outside", stage / "esc");
  ASSERT_EQ(std::system(("tar -C " + stage.string() + " -cf " + tarball.string() + " esc").c_str()),
            0);
  std::ifstream in(tarball, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::Status s = UnpackArchive(bytes, (root_ / "dest").string());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'esc'"), std::string_view::npos) << s;
  EXPECT_FALSE(fs::is_symlink(root_ / "dest" / "esc"));
}

TEST_F(ArchiveTest, RefusesGarbage) {
  EXPECT_FALSE(UnpackArchive("not an archive at all", (root_ / "dest").string()).ok());
}

TEST(Sha256HexTest, MatchesAKnownDigest) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace raio::jobs
