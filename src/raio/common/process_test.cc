#include "raio/common/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace raio {
namespace {

namespace fs = std::filesystem;

// A child process that waits until Release(); its stamp is taken while it runs.
class Child {
 public:
  Child() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char c;
      (void)!::read(fds[0], &c, 1);  // returns when the parent closes its end
      _exit(0);
    }
    ::close(fds[0]);
    release_fd_ = fds[1];
  }
  ~Child() {
    Release();
    Reap();
  }
  pid_t pid() const { return pid_; }
  void Release() {
    if (release_fd_ >= 0) ::close(release_fd_);
    release_fd_ = -1;
  }
  // Waits until it has exited, without reaping it (it stays a zombie).
  void WaitExited() {
    siginfo_t info{};
    ::waitid(P_PID, pid_, &info, WEXITED | WNOWAIT);
  }
  void Reap() {
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
};

// The stamp of a process that has exited and been reaped.
ProcessStamp DeadProcessStamp() {
  Child child;
  std::optional<ProcessStamp> stamp = ProcessStampOf(child.pid());
  EXPECT_TRUE(stamp.has_value());
  child.Release();
  child.Reap();
  return stamp.value_or(ProcessStamp{});
}

TEST(ProcessTest, SelfStampIsThisProcessAndStable) {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->pid, ::getpid());
  EXPECT_GT(self->start_ticks, 0u);
  std::optional<ProcessStamp> again = ProcessStampOf(::getpid());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->start_ticks, self->start_ticks);
  EXPECT_NE(SelfPidNamespace(), 0u);
}

TEST(ProcessTest, StampParsesCommandNamesWithSpacesAndParentheses) {
  char old_name[17] = {0};
  ASSERT_EQ(::prctl(PR_GET_NAME, old_name), 0);
  std::optional<ProcessStamp> before = SelfProcessStamp();
  ASSERT_EQ(::prctl(PR_SET_NAME, "a) 1 2 (b c) Z"), 0);
  std::optional<ProcessStamp> after = SelfProcessStamp();
  ::prctl(PR_SET_NAME, old_name);
  ASSERT_TRUE(before.has_value());
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->start_ticks, before->start_ticks);
  EXPECT_EQ(CheckProcess(::getpid(), before->start_ticks), ProcessLiveness::kAlive);
}

TEST(ProcessTest, LiveProcessIsAliveWithOrWithoutStartTime) {
  Child child;
  std::optional<ProcessStamp> stamp = ProcessStampOf(child.pid());
  ASSERT_TRUE(stamp.has_value());
  EXPECT_EQ(CheckProcess(child.pid()), ProcessLiveness::kAlive);
  EXPECT_EQ(CheckProcess(child.pid(), stamp->start_ticks), ProcessLiveness::kAlive);
}

TEST(ProcessTest, ReusedPidCountsAsGone) {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  ASSERT_TRUE(self.has_value());
  // The same pid with another start time is a later process: the recorded one is gone.
  EXPECT_EQ(CheckProcess(self->pid, self->start_ticks + 1), ProcessLiveness::kGone);
}

TEST(ProcessTest, ExitedProcessIsGoneEvenBeforeItIsReaped) {
  Child child;
  std::optional<ProcessStamp> stamp = ProcessStampOf(child.pid());
  ASSERT_TRUE(stamp.has_value());
  child.Release();
  child.WaitExited();  // a zombie now
  EXPECT_EQ(CheckProcess(child.pid(), stamp->start_ticks), ProcessLiveness::kGone);
  pid_t pid = child.pid();
  child.Reap();
  EXPECT_EQ(CheckProcess(pid, stamp->start_ticks), ProcessLiveness::kGone);
  EXPECT_EQ(CheckProcess(pid), ProcessLiveness::kGone);
}

class CleanStaleSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("TMPDIR");
    if (old) old_tmpdir_ = old;
    std::string templ = "/tmp/raio-pt-XXXXXX";  // short: TempBase() ignores long TMPDIRs
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    base_ = templ;
    ::setenv("TMPDIR", base_.c_str(), 1);
  }
  void TearDown() override {
    if (old_tmpdir_) {
      ::setenv("TMPDIR", old_tmpdir_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
    fs::remove_all(base_);
  }
  // A session directory whose "pid" file holds `pid_line`.
  fs::path Session(const std::string& name, const std::string& pid_line) {
    fs::path dir = base_ / ("raio-session-" + name);
    fs::create_directories(dir / "spill");
    if (!pid_line.empty()) std::ofstream(dir / "pid") << pid_line << "\n";
    std::ofstream(dir / "spill" / "object") << std::string(10000, 'x');
    return dir;
  }
  fs::path base_;
  std::optional<std::string> old_tmpdir_;
};

TEST_F(CleanStaleSessionsTest, RemovesOnlySessionsWhoseOwnerIsGone) {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  ASSERT_TRUE(self.has_value());
  const ProcessStamp dead = DeadProcessStamp();
  const std::string ns = std::to_string(SelfPidNamespace());
  auto line = [](const ProcessStamp& p, uint64_t ticks, const std::string& ns) {
    return std::to_string(p.pid) + " " + std::to_string(ticks) + " " + ns;
  };
  fs::path live = Session("live", line(*self, self->start_ticks, ns));
  fs::path written = base_ / "raio-session-written";
  fs::create_directories(written);
  ASSERT_TRUE(WriteSessionOwner(written.string()));
  fs::path dead_owner = Session("dead", line(dead, dead.start_ticks, ns));
  fs::path reused_pid = Session("reused", line(*self, self->start_ticks + 1, ns));
  fs::path legacy_dead = Session("legacy", std::to_string(dead.pid));
  fs::path other_ns = Session("otherns", line(dead, dead.start_ticks, ns + "1"));
  fs::path no_pid = Session("nopid", "");
  fs::path not_session = base_ / "raio-other-1";
  fs::create_directories(not_session);
  std::ofstream(not_session / "pid") << dead.pid << "\n";

  Reclaimed r = CleanStaleSessions();
  EXPECT_EQ(r.files, 3);
  EXPECT_GE(r.bytes, 3u * 10000);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(written));
  EXPECT_FALSE(fs::exists(dead_owner));
  EXPECT_FALSE(fs::exists(reused_pid));
  EXPECT_FALSE(fs::exists(legacy_dead));
  EXPECT_TRUE(fs::exists(other_ns));
  EXPECT_TRUE(fs::exists(no_pid));
  EXPECT_TRUE(fs::exists(not_session));
}

}  // namespace
}  // namespace raio
