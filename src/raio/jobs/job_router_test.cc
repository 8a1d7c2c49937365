#include "raio/jobs/job_router.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace raio::jobs {
namespace {

using nlohmann::json;

// A backend keeping jobs in a map; jobs never run.
class FakeBackend : public JobBackend {
 public:
  absl::StatusOr<std::string> Submit(SubmitRequest r) override {
    if (r.submission_id.empty()) r.submission_id = "gen_" + std::to_string(jobs_.size());
    if (jobs_.contains(r.submission_id)) return absl::AlreadyExistsError("duplicate");
    if (!r.runtime_env.working_dir.empty() &&
        !packages_.contains(r.runtime_env.working_dir.substr(6))) {
      return absl::InvalidArgumentError("not uploaded");
    }
    jobs_[r.submission_id] = NewRecord(r, 1000);
    return r.submission_id;
  }
  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError("no job " + id);
    return it->second;
  }
  absl::StatusOr<std::vector<JobRecord>> List() override {
    if (!down_.empty()) return absl::UnavailableError(down_);
    std::vector<JobRecord> out;
    for (auto& [k, v] : jobs_) out.push_back(v);
    return out;
  }
  absl::StatusOr<LogChunk> ReadLogs(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override {
    if (!jobs_.contains(id)) return absl::NotFoundError("no job " + id);
    LogChunk c;
    c.data = logs_.substr(std::min<size_t>(offset, logs_.size()), max_bytes);
    c.next_offset = offset + c.data.size();
    c.complete = c.next_offset >= logs_.size();
    return c;
  }
  absl::StatusOr<bool> Stop(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError("no job " + id);
    if (IsTerminal(it->second.status)) return false;
    it->second.status = JobStatus::kStopped;
    return true;
  }
  absl::Status Delete(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError("no job " + id);
    if (!IsTerminal(it->second.status)) return absl::FailedPreconditionError("running");
    jobs_.erase(it);
    return absl::OkStatus();
  }
  bool HasPackage(const std::string& name) override { return packages_.contains(name); }
  absl::Status PutPackage(const std::string& name, std::string_view bytes) override {
    if (bytes.size() > MaxPackageBytes()) return absl::ResourceExhaustedError("too large");
    packages_[name] = std::string(bytes);
    return absl::OkStatus();
  }
  uint64_t MaxPackageBytes() const override { return 16; }

  std::map<std::string, JobRecord> jobs_;
  std::map<std::string, std::string> packages_;
  std::string logs_ = "line 1\nline 2\n";
  std::string down_;  // List's Unavailable message when set
};

HttpResponse Do(FakeBackend& b, std::string method, std::string target, std::string body = "") {
  return Route(HttpRequest{std::move(method), std::move(target), std::move(body)}, b);
}

TEST(JobRouterTest, VersionAnswersRaysFields) {
  FakeBackend b;
  HttpResponse r = Do(b, "GET", "/api/version");
  ASSERT_EQ(r.status, 200);
  json j = json::parse(r.body);
  EXPECT_EQ(j["version"], "2");
  EXPECT_TRUE(j.contains("ray_version"));
}

TEST(JobRouterTest, SubmitGetListStopDeleteLifecycle) {
  FakeBackend b;
  HttpResponse r = Do(b, "POST", "/api/jobs/",
                      R"({"entrypoint": "echo hi", "submission_id": "a1",
                          "metadata": {"k": "v"}, "entrypoint_num_cpus": 1,
                          "runtime_env": {"env_vars": {"X": "1"}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["submission_id"], "a1");
  r = Do(b, "GET", "/api/jobs/a1");
  ASSERT_EQ(r.status, 200);
  json job = json::parse(r.body);
  EXPECT_EQ(job["status"], "PENDING");
  EXPECT_EQ(job["entrypoint"], "echo hi");
  EXPECT_EQ(job["metadata"]["k"], "v");
  EXPECT_EQ(job["runtime_env"]["env_vars"]["X"], "1");
  EXPECT_EQ(job["entrypoint_num_cpus"], 1.0);
  EXPECT_TRUE(job["start_time"].is_null());
  EXPECT_TRUE(job["driver_exit_code"].is_null());
  r = Do(b, "GET", "/api/jobs");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body).size(), 1u);
  r = Do(b, "DELETE", "/api/jobs/a1");
  EXPECT_EQ(r.status, 400) << "a non-terminal job cannot be deleted";
  r = Do(b, "POST", "/api/jobs/a1/stop");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["stopped"], true);
  r = Do(b, "POST", "/api/jobs/a1/stop");
  EXPECT_EQ(json::parse(r.body)["stopped"], false);
  r = Do(b, "GET", "/api/jobs/a1/logs");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["logs"], "line 1\nline 2\n");
  r = Do(b, "DELETE", "/api/jobs/a1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Do(b, "GET", "/api/jobs/a1").status, 404);
}

TEST(JobRouterTest, StorageDownIsServiceUnavailableWithItsMessage) {
  FakeBackend b;
  b.down_ = "the jobs storage, Redis at unix:///x.sock, cannot be reached";
  HttpResponse r = Do(b, "GET", "/api/jobs/");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"], b.down_);
}

TEST(JobRouterTest, BadInputGetsClearStatuses) {
  FakeBackend b;
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", "{not json").status, 400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", "[]").status, 400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": ""})").status, 400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": 3})").status, 400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": "x", "entrypoint_num_cpus": -1})").status,
            400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": "x", "submission_id": "../etc"})").status,
            400);
  HttpResponse r = Do(b, "POST", "/api/jobs/",
                      R"({"entrypoint": "x", "runtime_env": {"pip": ["a"], "conda": "b"}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("conda, pip"), std::string::npos) << r.body;
  r = Do(b, "POST", "/api/jobs/", R"({"entrypoint": "x", "bogus": 1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("bogus"), std::string::npos) << r.body;
  EXPECT_EQ(Do(b, "POST", "/api/jobs/",
               R"({"entrypoint": "x", "runtime_env": {"working_dir": "/tmp/x"}})")
                .status,
            400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": "x", "submission_id": "d"})").status,
            200);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", R"({"entrypoint": "x", "submission_id": "d"})").status,
            409);
  EXPECT_EQ(Do(b, "GET", "/api/jobs/nope").status, 404);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/nope/stop").status, 404);
  EXPECT_EQ(Do(b, "GET", "/api/jobs/nope/logs").status, 404);
  EXPECT_EQ(Do(b, "GET", "/nowhere").status, 404);
  EXPECT_EQ(Do(b, "PATCH", "/api/jobs/").status, 405);
  EXPECT_EQ(Do(b, "GET", "/api/jobs/d/logs/tail").status, 400);
}

TEST(JobRouterTest, RefusesAnEntrypointTooLongToExec) {
  // Broke: a 128 KiB entrypoint was accepted and failed as "exit 127" (execve's E2BIG).
  FakeBackend b;
  nlohmann::json body{{"entrypoint", std::string(kMaxEntrypointBytes + 1, 'x')}};
  HttpResponse r = Do(b, "POST", "/api/jobs/", body.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("over the limit of 65536 bytes"), std::string::npos) << r.body;
  body["entrypoint"] = std::string(kMaxEntrypointBytes, 'x');
  EXPECT_EQ(Do(b, "POST", "/api/jobs/", body.dump()).status, 200);
}

TEST(JobRouterTest, RefusesEnvVarsNamedRaio) {
  // Broke: RAIO_* env_vars were accepted with 200 and silently dropped.
  FakeBackend b;
  HttpResponse r = Do(b, "POST", "/api/jobs/",
                      R"({"entrypoint": "x", "runtime_env": {"env_vars":
                          {"RAIO_ADDRESS": "a", "OK": "1", "RAIO_X": "b"}}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("RAIO_ADDRESS, RAIO_X"), std::string::npos) << r.body;
}

TEST(JobRouterTest, PackagesUploadOnceAndRefuseOversize) {
  FakeBackend b;
  EXPECT_EQ(Do(b, "GET", "/api/packages/gcs/_raio_pkg_x.zip").status, 404);
  EXPECT_EQ(Do(b, "PUT", "/api/packages/gcs/_raio_pkg_x.zip", "small").status, 200);
  EXPECT_EQ(Do(b, "GET", "/api/packages/gcs/_raio_pkg_x.zip").status, 200);
  EXPECT_EQ(Do(b, "PUT", "/api/packages/gcs/big.zip", std::string(17, 'x')).status, 413);
  EXPECT_EQ(Do(b, "PUT", "/api/packages/gcs/..", "x").status, 400);
  EXPECT_EQ(Do(b, "PUT", "/api/packages/s3/a.zip", "x").status, 400);
  EXPECT_EQ(Do(b, "POST", "/api/jobs/",
               R"({"entrypoint": "x", "runtime_env": {"working_dir": "gcs://_raio_pkg_x.zip"}})")
                .status,
            200);
}

TEST(JobRouterTest, TailTargetNamesTheJob) {
  EXPECT_EQ(TailTarget("/api/jobs/abc/logs/tail"), "abc");
  EXPECT_EQ(TailTarget("/api/jobs/abc/logs/tail?x=1"), "abc");
  EXPECT_FALSE(TailTarget("/api/jobs/abc/logs").has_value());
}

TEST(TakeUtf8TextTest, TailKeepsACharacterSplitAcrossChunksWhole) {
  // Broke: the tail sent raw chunks as text frames, and a split "█" failed the client.
  std::string pending = "ab\xE2\x96";  // "█" is E2 96 88
  EXPECT_EQ(TakeUtf8Text(pending, false), "ab");
  EXPECT_EQ(pending, "\xE2\x96");
  pending +=
      "\x88"
      "z";
  EXPECT_EQ(TakeUtf8Text(pending, false), "\xE2\x96\x88z");
  EXPECT_TRUE(pending.empty());
}

TEST(TakeUtf8TextTest, TailReplacesBytesThatAreNotUtf8) {
  std::string pending =
      "a\xFF\xC0\x80"
      "b\xED\xA0\x80"
      "c\xF0\x9F\x98";
  EXPECT_EQ(TakeUtf8Text(pending, false),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "c");
  EXPECT_EQ(pending, "\xF0\x9F\x98");
  EXPECT_EQ(TakeUtf8Text(pending, true), "\xEF\xBF\xBD");  // the log ended mid-character
  EXPECT_TRUE(pending.empty());
  pending = "\xF0\x9F\x98\x80";
  EXPECT_EQ(TakeUtf8Text(pending, true), "\xF0\x9F\x98\x80");
}

TEST(JobRecordTest, RoundTripsThroughJson) {
  auto req = ParseSubmitRequest(R"({"entrypoint": "sleep 1", "submission_id": "r",
      "entrypoint_resources": {"slot": 2}, "runtime_env": {"excludes": ["*.o"]}})");
  ASSERT_TRUE(req.ok()) << req.status();
  JobRecord r = NewRecord(*req, 5);
  r.status = JobStatus::kFailed;
  r.driver_exit_code = 127;
  r.start_time_ms = 6;
  r.end_time_ms = 7;
  auto back = JobRecord::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), r.ToJson());
  EXPECT_EQ(req->Resources(), (std::map<std::string, double>{{"slot", 2}}));
}

}  // namespace
}  // namespace raio::jobs
