#include "raio/jobs/job_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "raio/jobs/archive.h"

namespace raio::jobs {
namespace {

namespace fs = std::filesystem;

// Records written by an earlier server are read back; no cluster is needed for that
// (the manager joins one only at its first submission).
TEST(JobManagerTest, ReadsRecordsBackAndFailsThoseThatWereRunning) {
  const fs::path dir =
      fs::temp_directory_path() / ("raio-job-manager-test-" + std::to_string(::getpid()));
  fs::create_directories(dir / "logs");
  JobRecord done =
      NewRecord(*ParseSubmitRequest(R"({"entrypoint": "true", "submission_id": "a"})"), 1);
  done.status = JobStatus::kSucceeded;
  done.driver_exit_code = 0;
  JobRecord running =
      NewRecord(*ParseSubmitRequest(R"({"entrypoint": "sleep 9", "submission_id": "b"})"), 2);
  running.status = JobStatus::kRunning;
  std::ofstream(dir / "jobs.json") << nlohmann::json::array({done.ToJson(), running.ToJson()});
  std::ofstream(dir / "logs" / "a.log") << "hello\n";
  {
    auto m = JobManager::Create({.head_address = "127.0.0.1:1", .state_dir = dir.string()});
    ASSERT_TRUE(m.ok()) << m.status();
    std::vector<JobRecord> jobs = *(*m)->List();
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].submission_id, "a");
    EXPECT_EQ(jobs[0].status, JobStatus::kSucceeded);
    EXPECT_EQ(jobs[1].status, JobStatus::kFailed);
    EXPECT_NE(jobs[1].message.find("restarted"), std::string::npos) << jobs[1].message;
    auto logs = (*m)->ReadLogs("a", 0, 100);
    ASSERT_TRUE(logs.ok());
    EXPECT_EQ(logs->data, "hello\n");
    EXPECT_TRUE(logs->complete);
    EXPECT_EQ((*m)->Get("zzz").status().code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE((*m)->Delete("a").ok());
    EXPECT_FALSE(fs::exists(dir / "logs" / "a.log"));
    // A package whose name carries a digest must match it.
    EXPECT_EQ((*m)->PutPackage("_raio_pkg_" + std::string(64, '0') + ".zip", "x").code(),
              absl::StatusCode::kInvalidArgument);
    const std::string name = "_raio_pkg_" + Sha256Hex("x") + ".zip";
    EXPECT_TRUE((*m)->PutPackage(name, "x").ok());
    EXPECT_TRUE((*m)->HasPackage(name));
  }
  // The change (b FAILED, a deleted) was persisted.
  auto again = JobManager::Create({.head_address = "127.0.0.1:1", .state_dir = dir.string()});
  ASSERT_TRUE(again.ok());
  std::vector<JobRecord> jobs = *(*again)->List();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].status, JobStatus::kFailed);
  again->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace raio::jobs
