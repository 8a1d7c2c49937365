#include "raio/node/object_store/store_files.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "raio/node/object_store/shm_region.h"

namespace raio::node {
namespace {

namespace fs = std::filesystem;

constexpr char kRandom[] = "Ab3dE9";

// The stamp of a child process that has exited and been reaped.
ProcessStamp DeadProcessStamp() {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    char c;
    (void)!::read(fds[0], &c, 1);
    _exit(0);
  }
  ::close(fds[0]);
  std::optional<ProcessStamp> stamp = ProcessStampOf(pid);
  ::close(fds[1]);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(stamp.has_value());
  return stamp.value_or(ProcessStamp{});
}

StoreFileCreator Self() {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  EXPECT_TRUE(self.has_value());
  return {self.value_or(ProcessStamp{}), SelfPidNamespace()};
}

TEST(StoreFilesTest, NameRecordsTheCreator) {
  StoreFileCreator c{{1234, 98765}, 4026531836};
  EXPECT_EQ(StoreFileStem(c), "raio-store-1234-98765-4026531836-");
  std::optional<StoreFileCreator> parsed = ParseStoreFileName(StoreFileStem(c) + kRandom);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->process.pid, 1234);
  EXPECT_EQ(parsed->process.start_ticks, 98765u);
  EXPECT_EQ(parsed->pid_namespace, 4026531836u);
}

TEST(StoreFilesTest, SelfStemNamesThisProcess) {
  std::optional<StoreFileCreator> parsed = ParseStoreFileName(SelfStoreFileStem() + kRandom);
  ASSERT_TRUE(parsed.has_value()) << SelfStoreFileStem();
  EXPECT_EQ(parsed->process.pid, ::getpid());
  EXPECT_EQ(parsed->process.start_ticks, Self().process.start_ticks);
  EXPECT_EQ(parsed->pid_namespace, SelfPidNamespace());
}

TEST(StoreFilesTest, OtherNamesHaveNoCreator) {
  for (const char* name : {
           "raio-store-Ab3dE9",                              // the anonymous (older) form
           "raio-store-1-2-3-Ab3d",                          // random part too short
           "raio-store-1-2-3-Ab3dE9x",                       // too long
           "raio-store-1-2-3-Ab3-E9",                        // a dash in the random part
           "raio-store-1-2-3-Ab3dE.",                        // not alphanumeric
           "raio-store-x-2-3-Ab3dE9",                        // pid not a number
           "raio-store-+1-2-3-Ab3dE9",                       // signs are not digits
           "raio-store-0-2-3-Ab3dE9",                        // pid 0
           "raio-store-1-2-0-Ab3dE9",                        // namespace 0
           "raio-store--2-3-Ab3dE9",                         // empty pid
           "raio-store-99999999999-2-3-Ab3dE9",              // pid out of range
           "raio-store-1-2-Ab3dE9",                          // a field missing
           "raio-session-1-2-3-Ab3dE9",                      // not a store
           "xraio-store-1-2-3-Ab3dE9",                       // prefix not at the start
           "raio-store-1-99999999999999999999999-3-Ab3dE9",  // ticks out of range
       }) {
    EXPECT_FALSE(ParseStoreFileName(name).has_value()) << name;
  }
}

TEST(StoreFilesTest, ShmRegionFileIsNamedAfterItsCreator) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> r = ShmRegion::Create(kDefaultShmDir, 4096, false);
  ASSERT_TRUE(r.ok()) << r.status();
  std::optional<StoreFileCreator> c =
      ParseStoreFileName(fs::path((*r)->path()).filename().string());
  ASSERT_TRUE(c.has_value()) << (*r)->path();
  EXPECT_EQ(c->process.pid, ::getpid());
  EXPECT_EQ(c->process.start_ticks, Self().process.start_ticks);
  // The creator is alive: a sweep of /dev/shm leaves the file alone.
  ReclaimStaleStoreFiles();
  struct stat st {};
  EXPECT_EQ(::stat((*r)->path().c_str(), &st), 0);
}

class StoreSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = "/tmp/raio-sweep-XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path File(const StoreFileCreator& c, const char* random = kRandom, size_t bytes = 8192) {
    fs::path p = dir_ / (StoreFileStem(c) + random);
    std::ofstream(p) << std::string(bytes, 'x');
    return p;
  }
  fs::path dir_;
};

TEST_F(StoreSweepTest, RemovesFilesOfDeadCreatorsOnly) {
  const StoreFileCreator self = Self();
  const StoreFileCreator dead{DeadProcessStamp(), self.pid_namespace};
  fs::path live = File(self);
  fs::path of_dead = File(dead);
  fs::path reused = File({{self.process.pid, self.process.start_ticks + 1}, self.pid_namespace});
  fs::path other_ns = File({dead.process, self.pid_namespace + 1});
  fs::path anonymous = dir_ / "raio-store-Ab3dE9";
  std::ofstream(anonymous) << "x";
  fs::path a_dir = dir_ / (StoreFileStem(dead) + "Dir000");
  fs::create_directories(a_dir);
  fs::path a_link = dir_ / (StoreFileStem(dead) + "Link00");
  fs::create_symlink(live, a_link);

  Reclaimed r = ReclaimStaleStoreFiles({.dir = dir_.string()});
  EXPECT_EQ(r.files, 2);
  EXPECT_GE(r.bytes, 2u * 8192);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_FALSE(fs::exists(of_dead));
  EXPECT_FALSE(fs::exists(reused));  // the pid is alive, but it is a later process
  EXPECT_TRUE(fs::exists(other_ns));
  EXPECT_TRUE(fs::exists(anonymous));
  EXPECT_TRUE(fs::exists(a_dir));
  EXPECT_TRUE(fs::is_symlink(a_link));
}

TEST_F(StoreSweepTest, LeavesOtherUsersFilesAlone) {
  const StoreFileCreator dead{DeadProcessStamp(), SelfPidNamespace()};
  fs::path of_dead = File(dead);
  // As if the files belonged to someone else: this sweep's user differs from theirs.
  Reclaimed r = ReclaimStaleStoreFiles({.dir = dir_.string(), .uid = ::geteuid() + 1});
  EXPECT_EQ(r.files, 0);
  EXPECT_TRUE(fs::exists(of_dead));
  r = ReclaimStaleStoreFiles({.dir = dir_.string()});
  EXPECT_EQ(r.files, 1);
  EXPECT_FALSE(fs::exists(of_dead));
}

TEST_F(StoreSweepTest, MissingDirectoryRemovesNothing) {
  Reclaimed r = ReclaimStaleStoreFiles({.dir = (dir_ / "missing").string()});
  EXPECT_EQ(r.files, 0);
  EXPECT_EQ(r.bytes, 0u);
}

}  // namespace
}  // namespace raio::node
